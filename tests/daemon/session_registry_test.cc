// What sessions may map into the daemon: buffers and bytes bounded per session, per uid and in
// all, with an error naming the limit; shares given back when a buffer is released or its
// session closes, or, while an operation still holds it, when it is finally unmapped.

#include "daemon/session_registry.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <memory>
#include <string>
#include <vector>

#include "common/shared_memory.h"
#include "device/host_fake.h"
#include "tests/testing/registered_only_endpoint.h"
#include "transport/forwarding_endpoint.h"
#include "transport/inmemory/inmemory_transport.h"

namespace baton::daemon {
namespace {

constexpr uint64_t kPage = 4096;
constexpr uint64_t kMiB = uint64_t{1} << 20;
constexpr uint64_t kTiB = uint64_t{1} << 40;

PeerCredentials Uid(uid_t uid) { return PeerCredentials{1234, uid, 100}; }

// A sealed memfd of `bytes` that holds no memory (nothing is ever written to it).
class SparseMemfd {
 public:
  explicit SparseMemfd(uint64_t bytes)
      : fd_(memfd_create("sparse", MFD_CLOEXEC | MFD_ALLOW_SEALING)) {
    EXPECT_GE(fd_, 0);
    EXPECT_EQ(ftruncate(fd_, static_cast<off_t>(bytes)), 0) << "errno " << errno;
    EXPECT_EQ(fcntl(fd_, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL), 0);
  }
  ~SparseMemfd() { close(fd_); }
  int fd() const { return fd_; }

 private:
  const int fd_;
};

class SessionRegistryTest : public ::testing::Test {
 protected:
  uint64_t Open(SessionRegistry& registry, uid_t uid) {
    absl::StatusOr<SessionRegistry::Grant> grant = registry.Open(Uid(uid), "test");
    EXPECT_TRUE(grant.ok()) << grant.status();
    return grant.ok() ? grant->id : 0;
  }

  // Registers a new sealed memfd of `bytes`.
  absl::StatusOr<uint64_t> Register(SessionRegistry& registry, uint64_t session, uint64_t bytes) {
    absl::StatusOr<std::unique_ptr<SharedMemory>> memory = SharedMemory::Create(bytes, "test");
    if (!memory.ok()) return memory.status();
    return registry.RegisterBuffer(session, (*memory)->fd(), bytes);
  }

  // Expects `status` to be ResourceExhausted naming `limit` (as a whole word).
  static void ExpectRefusedBy(const absl::Status& status, const std::string& limit) {
    EXPECT_TRUE(absl::IsResourceExhausted(status)) << status;
    EXPECT_NE(status.message().find("(" + limit + " = "), std::string::npos) << status;
  }
};

TEST_F(SessionRegistryTest, BuffersAreBoundedPerSessionAndReleasingGivesBack) {
  SessionLimits limits;
  limits.max_buffers_per_session = 4;
  SessionRegistry registry(limits);
  const uint64_t session = Open(registry, 1000);
  std::vector<uint64_t> buffers;
  for (int i = 0; i < 4; ++i) {
    absl::StatusOr<uint64_t> id = Register(registry, session, kPage);
    ASSERT_TRUE(id.ok()) << id.status();
    buffers.push_back(*id);
  }
  EXPECT_EQ(registry.SessionUsage(session).buffers, 4);
  EXPECT_EQ(registry.SessionUsage(session).bytes, 4 * kPage);
  ExpectRefusedBy(Register(registry, session, kPage).status(), "max_buffers_per_session");
  // Refused: nothing more is counted.
  EXPECT_EQ(registry.TotalUsage().buffers, 4);
  ASSERT_TRUE(registry.ReleaseBuffer(session, buffers[0]).ok());
  EXPECT_EQ(registry.SessionUsage(session).buffers, 3);
  EXPECT_EQ(registry.UidUsage(1000).bytes, 3 * kPage);
  EXPECT_TRUE(Register(registry, session, kPage).ok());
}

TEST_F(SessionRegistryTest, HostBuffersCountWholePagesAndAHugeSparseMemfdIsRefused) {
  SessionRegistry registry;  // the defaults
  const uint64_t session = Open(registry, 1000);
  // 128 TiB that cost the client nothing: it would take the daemon's whole address space.
  SparseMemfd sparse(128 * kTiB);
  absl::StatusOr<uint64_t> id = registry.RegisterBuffer(session, sparse.fd(), 128 * kTiB);
  ExpectRefusedBy(id.status(), "max_mapped_bytes_per_session");
  EXPECT_NE(id.status().message().find("128 TiB"), std::string::npos) << id.status();
  EXPECT_EQ(registry.TotalUsage().bytes, 0u);
  EXPECT_EQ(registry.TotalUsage().buffers, 0);
  // One byte and zero bytes each map a page.
  ASSERT_TRUE(Register(registry, session, 1).ok());
  ASSERT_TRUE(Register(registry, session, 0).ok());
  EXPECT_EQ(registry.SessionUsage(session).bytes, 2 * kPage);

  SessionLimits limits;
  limits.max_mapped_bytes_per_session = kMiB;
  SessionRegistry small(limits);
  const uint64_t other = Open(small, 1000);
  ASSERT_TRUE(Register(small, other, kMiB - kPage).ok());
  ASSERT_TRUE(Register(small, other, kPage - 100).ok());
  ExpectRefusedBy(Register(small, other, 1).status(), "max_mapped_bytes_per_session");
  // A size near 2^64 does not wrap around the check.
  SparseMemfd page(kPage);
  ExpectRefusedBy(small.RegisterBuffer(other, page.fd(), ~uint64_t{0} - 10).status(),
                  "max_mapped_bytes_per_session");
}

TEST_F(SessionRegistryTest, UidLimitsSpanItsSessionsAndLeaveOtherUidsAlone) {
  SessionLimits limits;
  limits.max_buffers_per_uid = 3;
  limits.max_mapped_bytes_per_uid = kMiB;
  SessionRegistry registry(limits);
  const uint64_t first = Open(registry, 1000);
  const uint64_t second = Open(registry, 1000);
  ASSERT_TRUE(Register(registry, first, kPage).ok());
  ASSERT_TRUE(Register(registry, first, kPage).ok());
  ASSERT_TRUE(Register(registry, second, kPage).ok());
  absl::StatusOr<uint64_t> refused = Register(registry, second, kPage);
  ExpectRefusedBy(refused.status(), "max_buffers_per_uid");
  EXPECT_NE(refused.status().message().find("uid 1000"), std::string::npos) << refused.status();
  EXPECT_EQ(registry.UidUsage(1000).buffers, 3);
  // Another uid registers as usual, and a large buffer is refused by its own byte limit.
  const uint64_t stranger = Open(registry, 2000);
  ASSERT_TRUE(Register(registry, stranger, kPage).ok());
  ASSERT_TRUE(Register(registry, stranger, kMiB / 2).ok());
  ExpectRefusedBy(Register(registry, stranger, kMiB / 2).status(), "max_mapped_bytes_per_uid");
  EXPECT_EQ(registry.UidUsage(2000).buffers, 2);
  // Closing a session gives its share back to its uid.
  ASSERT_TRUE(registry.Close(first).ok());
  EXPECT_EQ(registry.UidUsage(1000).buffers, 1);
  EXPECT_EQ(registry.SessionUsage(first).buffers, 0);
  EXPECT_TRUE(Register(registry, second, kPage).ok());
}

TEST_F(SessionRegistryTest, TheTotalBoundsAllUidsTogether) {
  SessionLimits limits;
  limits.max_buffers = 3;
  limits.max_mapped_bytes = 4 * kMiB;
  SessionRegistry registry(limits);
  const uint64_t a = Open(registry, 1000);
  const uint64_t b = Open(registry, 2000);
  const uint64_t c = Open(registry, 3000);
  ASSERT_TRUE(Register(registry, a, kPage).ok());
  ASSERT_TRUE(Register(registry, b, 3 * kMiB).ok());
  ExpectRefusedBy(Register(registry, c, kMiB).status(), "max_mapped_bytes");
  ASSERT_TRUE(Register(registry, c, kPage).ok());
  ExpectRefusedBy(Register(registry, c, kPage).status(), "max_buffers");
  EXPECT_EQ(registry.TotalUsage().buffers, 3);
  EXPECT_EQ(registry.TotalUsage().bytes, 3 * kMiB + 2 * kPage);
}

// A buffer an operation still holds stays mapped after its release, and counts until it is
// unmapped, even after its session closed and the registry itself is gone.
TEST_F(SessionRegistryTest, APinnedBufferCountsUntilItIsUnmapped) {
  auto registry = std::make_unique<SessionRegistry>();
  const uint64_t session = Open(*registry, 1000);
  absl::StatusOr<uint64_t> id = Register(*registry, session, 8 * kPage);
  ASSERT_TRUE(id.ok()) << id.status();
  absl::StatusOr<BufferRegion> region = registry->Resolve(session, *id, 0, 8 * kPage);
  ASSERT_TRUE(region.ok()) << region.status();
  ASSERT_TRUE(registry->ReleaseBuffer(session, *id).ok());
  EXPECT_EQ(registry->SessionUsage(session).bytes, 8 * kPage);
  EXPECT_EQ(registry->UidUsage(1000).buffers, 1);
  region->pin.reset();
  region->host.reset();
  EXPECT_EQ(registry->SessionUsage(session).buffers, 0);
  EXPECT_EQ(registry->UidUsage(1000).bytes, 0u);

  id = Register(*registry, session, kPage);
  ASSERT_TRUE(id.ok()) << id.status();
  region = registry->Resolve(session, *id, 0, kPage);
  ASSERT_TRUE(region.ok()) << region.status();
  ASSERT_TRUE(registry->Close(session).ok());
  EXPECT_EQ(registry->UidUsage(1000).buffers, 1);
  registry.reset();
  static_cast<std::byte*>(region->data)[0] = std::byte{1};  // still mapped
  region->pin.reset();
  region->host.reset();  // unmapped now, after the registry: nothing to crash on
}

TEST_F(SessionRegistryTest, DeviceBuffersAndEventSetsCountToo) {
  std::unique_ptr<device::HostFakeDevice> device = device::NewHostFakeDevice();
  SessionLimits limits;
  limits.max_buffers_per_session = 2;
  limits.max_mapped_bytes_per_session = kMiB;
  SessionRegistry registry(limits, device.get());
  const uint64_t session = Open(registry, 1000);
  absl::StatusOr<std::unique_ptr<device::Allocation>> large = device->Allocate(2 * kMiB, 0);
  ASSERT_TRUE(large.ok()) << large.status();
  absl::StatusOr<device::ExportedMemory> exported = device->Export((*large)->data(), 2 * kMiB);
  ASSERT_TRUE(exported.ok()) << exported.status();
  ExpectRefusedBy(registry.RegisterDeviceBuffer(session, *std::move(exported)).status(),
                  "max_mapped_bytes_per_session");
  absl::StatusOr<std::unique_ptr<device::Allocation>> small = device->Allocate(64 << 10, 0);
  ASSERT_TRUE(small.ok()) << small.status();
  exported = device->Export((*small)->data(), 64 << 10);
  ASSERT_TRUE(exported.ok()) << exported.status();
  absl::StatusOr<uint64_t> id = registry.RegisterDeviceBuffer(session, *std::move(exported));
  ASSERT_TRUE(id.ok()) << id.status();
  EXPECT_EQ(registry.SessionUsage(session).bytes, uint64_t{64} << 10);
  // An event set is one more buffer, of no bytes.
  absl::StatusOr<std::unique_ptr<device::Event>> event = device->CreateIpcEvent();
  ASSERT_TRUE(event.ok()) << event.status();
  auto events = [&]() {
    std::vector<device::EventHandle> handles;
    absl::StatusOr<device::EventHandle> handle = (*event)->Export();
    EXPECT_TRUE(handle.ok()) << handle.status();
    if (handle.ok()) handles.push_back(*std::move(handle));
    return handles;
  };
  absl::StatusOr<uint64_t> set = registry.RegisterEvents(session, events());
  ASSERT_TRUE(set.ok()) << set.status();
  EXPECT_EQ(registry.SessionUsage(session).buffers, 2);
  ExpectRefusedBy(registry.RegisterEvents(session, events()).status(), "max_buffers_per_session");
  ASSERT_TRUE(registry.ReleaseBuffer(session, *set).ok());
  ASSERT_TRUE(registry.ReleaseBuffer(session, *id).ok());
  EXPECT_EQ(registry.TotalUsage().buffers, 0);
  EXPECT_EQ(registry.TotalUsage().bytes, 0u);
}

// Every buffer is registered with the data plane when it is mapped and deregistered only once
// nothing uses it; device memory is registered where the data plane moves it; a registration
// that fails refuses the buffer and charges nothing.
TEST_F(SessionRegistryTest, BuffersAreRegisteredWithTheDataPlaneWhileMapped) {
  auto fabric = transport::NewInMemoryFabric();
  std::unique_ptr<transport::Endpoint> inner = *fabric->CreateEndpoint("a");
  test::RegisteredOnlyEndpoint data_plane(inner.get());
  std::unique_ptr<device::HostFakeDevice> device = device::NewHostFakeDevice();
  {
    SessionRegistry registry({}, device.get(), &data_plane);
    const uint64_t session = Open(registry, 1000);
    absl::StatusOr<uint64_t> id = Register(registry, session, 2 * kPage);
    ASSERT_TRUE(id.ok()) << id.status();
    EXPECT_EQ(data_plane.live_regions(), 1u);
    absl::StatusOr<BufferRegion> region = registry.Resolve(session, *id, kPage, 16);
    ASSERT_TRUE(region.ok()) << region.status();
    ASSERT_NE(region->registered, nullptr);
    EXPECT_EQ(region->registered->bytes().size(), 2 * kPage);
    EXPECT_EQ(region->registered->bytes().data() + kPage, region->data);
    ASSERT_TRUE(registry.ReleaseBuffer(session, *id).ok());
    EXPECT_EQ(data_plane.live_regions(), 1u);  // an operation still uses it
    region->pin.reset();
    region->host.reset();
    EXPECT_EQ(data_plane.live_regions(), 0u);

    // Device memory this data plane cannot move: mapped, not registered (it is staged).
    absl::StatusOr<std::unique_ptr<device::Allocation>> memory = device->Allocate(64 << 10, 0);
    ASSERT_TRUE(memory.ok()) << memory.status();
    absl::StatusOr<device::ExportedMemory> exported = device->Export((*memory)->data(), 64 << 10);
    ASSERT_TRUE(exported.ok()) << exported.status();
    id = registry.RegisterDeviceBuffer(session, *std::move(exported));
    ASSERT_TRUE(id.ok()) << id.status();
    region = registry.Resolve(session, *id, 0, 64 << 10);
    ASSERT_TRUE(region.ok()) << region.status();
    EXPECT_EQ(region->registered, nullptr);
    EXPECT_EQ(data_plane.live_regions(), 0u);
  }
  // A data plane that moves device memory registers it.
  test::RegisteredOnlyEndpoint direct(inner.get(), /*moves_device=*/true);
  {
    SessionRegistry registry({}, device.get(), &direct);
    const uint64_t session = Open(registry, 1000);
    absl::StatusOr<std::unique_ptr<device::Allocation>> memory = device->Allocate(64 << 10, 0);
    ASSERT_TRUE(memory.ok()) << memory.status();
    absl::StatusOr<device::ExportedMemory> exported = device->Export((*memory)->data(), 64 << 10);
    ASSERT_TRUE(exported.ok()) << exported.status();
    absl::StatusOr<uint64_t> id = registry.RegisterDeviceBuffer(session, *std::move(exported));
    ASSERT_TRUE(id.ok()) << id.status();
    absl::StatusOr<BufferRegion> region = registry.Resolve(session, *id, 0, 64 << 10);
    ASSERT_TRUE(region.ok()) << region.status();
    ASSERT_NE(region->registered, nullptr);
    EXPECT_EQ(region->registered->kind(), transport::MemoryKind::kDevice);
    EXPECT_EQ(direct.live_regions(), 1u);
  }
  EXPECT_EQ(direct.live_regions(), 0u);

  // A data plane that cannot register (out of pinnable memory, say): the buffer is refused.
  class Refusing final : public transport::ForwardingEndpoint {
   public:
    using ForwardingEndpoint::ForwardingEndpoint;
    absl::StatusOr<std::unique_ptr<transport::MemoryRegion>> RegisterMemory(
        transport::ByteSpan, transport::MemoryKind) override {
      return absl::ResourceExhaustedError("no more pinnable memory");
    }
  } refusing(inner.get());
  SessionRegistry registry({}, nullptr, &refusing);
  const uint64_t session = Open(registry, 1000);
  const absl::Status refused = Register(registry, session, kPage).status();
  EXPECT_TRUE(absl::IsResourceExhausted(refused)) << refused;
  EXPECT_NE(refused.message().find("could not register"), std::string::npos) << refused;
  EXPECT_EQ(registry.SessionUsage(session).buffers, 0);
  EXPECT_EQ(registry.TotalUsage().bytes, 0u);
}

TEST_F(SessionRegistryTest, UidOfNamesTheOpenersUid) {
  SessionRegistry registry;
  const uint64_t session = Open(registry, 4242);
  absl::StatusOr<uid_t> uid = registry.UidOf(session);
  ASSERT_TRUE(uid.ok()) << uid.status();
  EXPECT_EQ(*uid, 4242u);
  ASSERT_TRUE(registry.Close(session).ok());
  EXPECT_TRUE(absl::IsNotFound(registry.UidOf(session).status()));
}

// Communicator ranks a session holds (joined or joining) are bounded per session, per uid and in
// all, each refusal naming its limit; Destroy and the session's end give them back.
TEST_F(SessionRegistryTest, HeldRanksAreBoundedPerSessionPerUidAndInAll) {
  SessionLimits limits;
  limits.max_ranks_per_session = 3;
  limits.max_ranks_per_uid = 5;
  limits.max_ranks = 7;
  SessionRegistry registry(limits);
  const uint64_t a1 = Open(registry, 1000);
  const uint64_t a2 = Open(registry, 1000);
  const uint64_t b = Open(registry, 2000);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(registry.HoldRank(a1).ok()) << i;
  ExpectRefusedBy(registry.HoldRank(a1), "max_ranks_per_session");
  ASSERT_TRUE(registry.HoldRank(a2).ok());
  ASSERT_TRUE(registry.HoldRank(a2).ok());
  ExpectRefusedBy(registry.HoldRank(a2), "max_ranks_per_uid");
  ASSERT_TRUE(registry.HoldRank(b).ok()) << "another uid is not held back by uid 1000";
  ASSERT_TRUE(registry.HoldRank(b).ok());
  ExpectRefusedBy(registry.HoldRank(b), "max_ranks");
  // Given back: one destroyed, then a whole session closed.
  registry.ReleaseRanks(a1, 1);
  EXPECT_TRUE(registry.HoldRank(b).ok()) << "the total had room again";
  ASSERT_TRUE(registry.Close(a1).ok());
  EXPECT_TRUE(registry.HoldRank(a2).ok()) << "uid 1000's share came back with the session";
  registry.ReleaseRanks(a1, 1);  // a closed session: nothing to give back, nothing goes wrong
  EXPECT_TRUE(absl::IsNotFound(registry.HoldRank(a1)));
}

}  // namespace
}  // namespace baton::daemon
