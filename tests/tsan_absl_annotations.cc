// Linked into test binaries only when building with -fsanitize=thread.
//
// Debian's libabsl is not built with ThreadSanitizer, so TSan cannot see the happens-before edges
// that absl::Mutex creates and reports every access guarded by one as a data race. This file
// interposes the Mutex and CondVar entry points: each calls the library's own function (found with
// dlsym(RTLD_NEXT)) and tells TSan that the mutex was released before it is given up and acquired
// once it is held again (also before evaluating a Condition). Calls from our code bind to these
// definitions at link time. It can go once absl is built with -fsanitize=thread.

#include <dlfcn.h>
#include <sanitizer/tsan_interface.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/base/config.h"
#include "absl/base/macros.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace {

#define BATON_TSAN_STRINGIFY_INNER(x) #x
#define BATON_TSAN_STRINGIFY(x) BATON_TSAN_STRINGIFY_INNER(x)

// Itanium-mangles "absl::<inline namespace>::<member>" given the member's mangled tail.
std::string Mangle(const char* tail) {
#if ABSL_OPTION_USE_INLINE_NAMESPACE
  const std::string inline_namespace = BATON_TSAN_STRINGIFY(ABSL_OPTION_INLINE_NAMESPACE_NAME);
  return "_ZN4absl" + std::to_string(inline_namespace.size()) + inline_namespace + tail;
#else
  return std::string("_ZN4absl") + tail;
#endif
}

template <typename Fn>
Fn Real(const char* tail) {
  const std::string symbol = Mangle(tail);
  void* fn = dlsym(RTLD_NEXT, symbol.c_str());
  if (fn == nullptr) {
    std::fprintf(stderr, "tsan_absl_annotations: %s not found in libabsl\n", symbol.c_str());
    std::abort();
  }
  return reinterpret_cast<Fn>(fn);
}

// A condition is evaluated with the mutex held but inside the library, by the waiter or by
// whichever thread unlocks, outside the annotated windows above. Acquiring before and releasing
// after orders its reads with the writes of every other holder of the mutex.
struct AnnotatedCondition {
  const absl::Condition* cond;
  absl::Mutex* mu;
  static bool Eval(void* arg) {
    auto* self = static_cast<AnnotatedCondition*>(arg);
    __tsan_acquire(self->mu);
    const bool result = self->cond->Eval();
    __tsan_release(self->mu);
    return result;
  }
};

}  // namespace

namespace absl {
ABSL_NAMESPACE_BEGIN

void Mutex::Lock() {
  static const auto real = Real<void (*)(Mutex*)>("5Mutex4LockEv");
  real(this);
  __tsan_acquire(this);
}

void Mutex::ReaderLock() {
  static const auto real = Real<void (*)(Mutex*)>("5Mutex10ReaderLockEv");
  real(this);
  __tsan_acquire(this);
}

bool Mutex::TryLock() {
  static const auto real = Real<bool (*)(Mutex*)>("5Mutex7TryLockEv");
  const bool locked = real(this);
  if (locked) __tsan_acquire(this);
  return locked;
}

void Mutex::Unlock() {
  static const auto real = Real<void (*)(Mutex*)>("5Mutex6UnlockEv");
  __tsan_release(this);
  real(this);
}

void Mutex::ReaderUnlock() {
  static const auto real = Real<void (*)(Mutex*)>("5Mutex12ReaderUnlockEv");
  __tsan_release(this);
  real(this);
}

void Mutex::LockWhen(const Condition& cond) {
  AnnotatedCondition wrapped{&cond, this};
  const Condition annotated(&AnnotatedCondition::Eval, &wrapped);
  static const auto real =
      Real<void (*)(Mutex*, const Condition&)>("5Mutex8LockWhenERKNS0_9ConditionE");
  real(this, annotated);
  __tsan_acquire(this);
}

bool Mutex::LockWhenWithDeadline(const Condition& cond, Time deadline) {
  AnnotatedCondition wrapped{&cond, this};
  const Condition annotated(&AnnotatedCondition::Eval, &wrapped);
  static const auto real = Real<bool (*)(Mutex*, const Condition&, Time)>(
      "5Mutex20LockWhenWithDeadlineERKNS0_9ConditionENS0_4TimeE");
  const bool result = real(this, annotated, deadline);
  __tsan_acquire(this);
  return result;
}

void Mutex::Await(const Condition& cond) {
  AnnotatedCondition wrapped{&cond, this};
  const Condition annotated(&AnnotatedCondition::Eval, &wrapped);
  static const auto real =
      Real<void (*)(Mutex*, const Condition&)>("5Mutex5AwaitERKNS0_9ConditionE");
  __tsan_release(this);
  real(this, annotated);
  __tsan_acquire(this);
}

bool Mutex::AwaitWithDeadline(const Condition& cond, Time deadline) {
  AnnotatedCondition wrapped{&cond, this};
  const Condition annotated(&AnnotatedCondition::Eval, &wrapped);
  static const auto real = Real<bool (*)(Mutex*, const Condition&, Time)>(
      "5Mutex17AwaitWithDeadlineERKNS0_9ConditionENS0_4TimeE");
  __tsan_release(this);
  const bool result = real(this, annotated, deadline);
  __tsan_acquire(this);
  return result;
}

bool Mutex::AwaitWithTimeout(const Condition& cond, Duration timeout) {
  AnnotatedCondition wrapped{&cond, this};
  const Condition annotated(&AnnotatedCondition::Eval, &wrapped);
  static const auto real = Real<bool (*)(Mutex*, const Condition&, Duration)>(
      "5Mutex16AwaitWithTimeoutERKNS0_9ConditionENS0_8DurationE");
  __tsan_release(this);
  const bool result = real(this, annotated, timeout);
  __tsan_acquire(this);
  return result;
}

void CondVar::Wait(Mutex* mu) {
  static const auto real = Real<void (*)(CondVar*, Mutex*)>("7CondVar4WaitEPNS0_5MutexE");
  __tsan_release(mu);
  real(this, mu);
  __tsan_acquire(mu);
}

bool CondVar::WaitWithDeadline(Mutex* mu, Time deadline) {
  static const auto real =
      Real<bool (*)(CondVar*, Mutex*, Time)>("7CondVar16WaitWithDeadlineEPNS0_5MutexENS0_4TimeE");
  __tsan_release(mu);
  const bool result = real(this, mu, deadline);
  __tsan_acquire(mu);
  return result;
}

bool CondVar::WaitWithTimeout(Mutex* mu, Duration timeout) {
  static const auto real = Real<bool (*)(CondVar*, Mutex*, Duration)>(
      "7CondVar15WaitWithTimeoutEPNS0_5MutexENS0_8DurationE");
  __tsan_release(mu);
  const bool result = real(this, mu, timeout);
  __tsan_acquire(mu);
  return result;
}

ABSL_NAMESPACE_END
}  // namespace absl

namespace {

// absl::Mutex's deadlock detector keeps one process-wide lock graph inside libabsl, behind a lock
// TSan cannot see either. Tests that create and destroy endpoints on many threads at once then
// get the graph's array copies (memmove, which TSan intercepts even in uninstrumented code)
// reported as races. Under TSan the detector only adds those false reports, so it is off in every
// test that links this file.
[[maybe_unused]] const bool kDeadlockDetectionOff = [] {
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  return true;
}();

}  // namespace
