#pragma once

// Memory shared between a rank and its daemon: an anonymous memfd that the rank creates, sizes and
// seals against shrinking and growing, and whose descriptor it hands to the daemon over the
// session socket (SCM_RIGHTS). Nothing is ever opened by name, so no other process can reach the
// memory through /dev/shm, and a sealed object cannot shrink under a mapping (which would make
// the daemon's accesses fault with SIGBUS).

#include <cstddef>
#include <memory>

#include "absl/status/statusor.h"

namespace baton {

class SharedMemory {
 public:
  // Creates and maps a sealed memfd of `size` bytes (`label` names it in /proc/<pid>/fd). The
  // descriptor stays open, for passing to the daemon, until CloseFd().
  static absl::StatusOr<std::unique_ptr<SharedMemory>> Create(size_t size, const char* label);

  // Maps `size` bytes of a descriptor a rank passed: it must be a regular memfd sealed against
  // shrinking (F_SEAL_SHRINK) and hold at least `size` bytes (InvalidArgument otherwise, saying
  // which). Does not take the descriptor: the caller closes it.
  static absl::StatusOr<std::unique_ptr<SharedMemory>> Map(int fd, size_t size);

  // The descriptor of a created object (-1 once closed, and for mapped ones).
  int fd() const { return fd_; }
  void CloseFd();

  ~SharedMemory();
  SharedMemory(const SharedMemory&) = delete;
  SharedMemory& operator=(const SharedMemory&) = delete;

  void* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  SharedMemory(void* data, size_t size, int fd) : data_(data), size_(size), fd_(fd) {}

  void* data_;
  size_t size_;
  int fd_;
};

}  // namespace baton
