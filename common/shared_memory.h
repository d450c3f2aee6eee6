#pragma once

// A POSIX shared-memory mapping, shared between a rank (which creates it) and its daemon (which
// opens it by name while the rank registers it). The name is unlinked as soon as both sides hold
// a mapping, so nothing is left in /dev/shm when either process dies.

#include <cstddef>
#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace baton {

class SharedMemory {
 public:
  // Creates a new object `name` (must start with '/') of `size` bytes, mode 0600, and maps it.
  // AlreadyExists if the name is taken.
  static absl::StatusOr<std::unique_ptr<SharedMemory>> Create(const std::string& name, size_t size);

  // Maps an existing object. InvalidArgument if it is smaller than `size`; NotFound if absent.
  static absl::StatusOr<std::unique_ptr<SharedMemory>> Open(const std::string& name, size_t size);

  // Removes the name (the mapping stays valid). Idempotent.
  void Unlink();

  ~SharedMemory();
  SharedMemory(const SharedMemory&) = delete;
  SharedMemory& operator=(const SharedMemory&) = delete;

  void* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& name() const { return name_; }

 private:
  SharedMemory(std::string name, void* data, size_t size, bool owns_name)
      : name_(std::move(name)), data_(data), size_(size), owns_name_(owns_name) {}

  std::string name_;
  void* data_;
  size_t size_;
  bool owns_name_;  // we created it and have not unlinked it yet
};

}  // namespace baton
