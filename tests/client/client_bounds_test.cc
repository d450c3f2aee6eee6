// A rank's own mistakes cannot corrupt its memory through libbaton: a count whose staging size
// would wrap fails instead of staging nothing and writing past a small buffer, and a range that
// starts in a baton_client_alloc buffer but runs past its end is refused (the library knows the
// buffer's size) instead of staged and copied over the neighbouring memory. A refused collective
// fails the communicator from there on, on every rank, since the others would wait for it.

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "baton/baton.h"
#include "tests/client/c_api_test_support.h"

namespace baton::testing {
namespace {

::testing::Environment* const environment =
    ::testing::AddGlobalTestEnvironment(new ClusterEnvironment);

TEST(ClientBounds, ACountWhoseStagingWouldWrapFailsAndTouchesNothing) {
  RunRanks([](Rank& r) {
    std::vector<uint8_t> send(64, 1), recv(64, 7);
    EXPECT_TRUE(Succeeds(
        baton_all_reduce(r.comm, send.data(), recv.data(), 64, BATON_UINT8, BATON_SUM, nullptr)));
    EXPECT_EQ(recv, std::vector<uint8_t>(64, kWorld));
    recv.assign(64, 7);
    // 2^63 bytes in and 2^63 out: staged together they would wrap to 0 bytes.
    const size_t huge = size_t{1} << 63;
    EXPECT_TRUE(Fails(
        baton_all_reduce(r.comm, send.data(), recv.data(), huge, BATON_UINT8, BATON_SUM, nullptr),
        BATON_RESOURCE_EXHAUSTED));
    EXPECT_EQ(recv, std::vector<uint8_t>(64, 7));
    EXPECT_TRUE(FailsWith(
        baton_all_reduce(r.comm, send.data(), recv.data(), 64, BATON_UINT8, BATON_SUM, nullptr),
        BATON_ABORTED, "was refused"));
    EXPECT_EQ(recv, std::vector<uint8_t>(64, 7));
  });
}

TEST(ClientBounds, ARangePastTheEndOfAnAllocatedBufferIsRefused) {
  RunRanks([](Rank& r) {
    void* small = nullptr;
    void* neighbour = nullptr;
    ASSERT_TRUE(Succeeds(baton_client_alloc(r.client, 64, &small)));
    ASSERT_TRUE(Succeeds(baton_client_alloc(r.client, 4096, &neighbour)));
    std::memset(neighbour, 0x5a, 4096);
    std::vector<float> send(256, 1.0f);
    // What fits works in place.
    EXPECT_TRUE(Succeeds(
        baton_all_reduce(r.comm, send.data(), small, 16, BATON_FLOAT32, BATON_SUM, nullptr)));
    EXPECT_EQ(static_cast<float*>(small)[15], static_cast<float>(kWorld));
    // 1 KiB into a 64-byte buffer: refused, whatever lies after it.
    EXPECT_TRUE(FailsWith(
        baton_all_reduce(r.comm, send.data(), small, 256, BATON_FLOAT32, BATON_SUM, nullptr),
        BATON_INVALID_ARGUMENT, "ends before that"));
    // Starting inside it, too, and as the source.
    EXPECT_TRUE(FailsWith(baton_all_reduce(r.comm, static_cast<char*>(small) + 32, send.data(), 16,
                                           BATON_FLOAT32, BATON_SUM, nullptr),
                          BATON_INVALID_ARGUMENT, "send needs 64 bytes"));
    for (int i = 0; i < 4096; ++i) {
      ASSERT_EQ(static_cast<unsigned char*>(neighbour)[i], 0x5a) << "byte " << i;
    }
    EXPECT_TRUE(FailsWith(
        baton_all_reduce(r.comm, send.data(), small, 16, BATON_FLOAT32, BATON_SUM, nullptr),
        BATON_ABORTED, "was refused"));
    EXPECT_TRUE(Succeeds(baton_client_free(r.client, small)));
    EXPECT_TRUE(Succeeds(baton_client_free(r.client, neighbour)));
  });
}

}  // namespace
}  // namespace baton::testing
