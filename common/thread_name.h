#pragma once

// Names the calling thread, as `top -H`, `perf` and debuggers show it. At most 15 characters: a
// longer name is refused. Best effort: a failure changes nothing else.

#include <pthread.h>

namespace baton {

inline void SetThreadName(const char* name) { pthread_setname_np(pthread_self(), name); }

}  // namespace baton
