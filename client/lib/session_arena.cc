// Session's node arenas (client/lib/session.h): the shared memory the daemon makes for one
// communicator's ranks on one node (collective/node_arena.h), mapped in this process.

#include <unistd.h>

#include <memory>
#include <vector>

#include "client/lib/session.h"
#include "collective/node_arena.h"
#include "common/status_macros.h"

namespace baton::core {

absl::StatusOr<Session::Arena> Session::OpenArena(uint64_t comm_tag, int rank) {
  session::Request request;
  request.type = static_cast<uint32_t>(session::RequestType::kOpenArena);
  request.comm_tag = comm_tag;
  request.rank = rank;
  int fd = -1;
  BATON_ASSIGN_OR_RETURN(session::Reply reply, Exchange(request, {}, kControlTimeout, &fd));
  if (fd < 0) return absl::InternalError("batond sent the node arena without its descriptor");
  absl::StatusOr<std::unique_ptr<SharedMemory>> memory = SharedMemory::Map(fd, reply.arena_bytes);
  close(fd);  // the mapping keeps the memory
  if (!memory.ok()) return memory.status();
  std::shared_ptr<SharedMemory> shared = *std::move(memory);
  absl::MutexLock lock(&mu_);
  std::erase_if(arenas_, [](const std::weak_ptr<SharedMemory>& arena) { return arena.expired(); });
  arenas_.push_back(shared);
  return Arena{std::move(shared), reply.arena_rank};
}

void Session::MarkLost() {
  lost_.store(true);
  std::vector<std::shared_ptr<SharedMemory>> arenas;
  {
    absl::MutexLock lock(&mu_);
    for (const std::weak_ptr<SharedMemory>& arena : arenas_) {
      if (std::shared_ptr<SharedMemory> live = arena.lock()) arenas.push_back(std::move(live));
    }
  }
  for (const std::shared_ptr<SharedMemory>& arena : arenas) {
    collective::AbortArena(arena->data(), arena->size(),
                           absl::UnavailableError("batond went away (its session closed)"));
  }
}

}  // namespace baton::core
