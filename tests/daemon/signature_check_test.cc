#include <bitset>
#include <vector>

#include "collective/operation_runner.h"
#include "gtest/gtest.h"

namespace baton::collective {
namespace {

// Whatever the size, the signature check runs along one cycle through every daemon, so that any
// disagreement shows between some pair of neighbours.
TEST(SignatureCheckTest, NeighboursFormOneCycleThroughEveryDaemon) {
  for (int size = 2; size <= 70; ++size) {
    std::vector<bool> seen(size, false);
    int at = 0;
    for (int hop = 0; hop < size; ++hop) {
      ASSERT_FALSE(seen[at]) << "size " << size << ": daemon " << at << " visited twice";
      seen[at] = true;
      const CheckNeighbours here = SignatureCheckNeighbours(at, size);
      ASSERT_GE(here.next, 0);
      ASSERT_LT(here.next, size);
      EXPECT_EQ(SignatureCheckNeighbours(here.next, size).prev, at) << "size " << size;
      at = here.next;
    }
    EXPECT_EQ(at, 0) << "size " << size << ": the cycle does not close";
  }
}

// With a power-of-two number of daemons, neighbours are partners of the pairwise all-reduces
// (positions one bit apart); otherwise the ring order.
TEST(SignatureCheckTest, PowersOfTwoFollowTheGrayCodeElseTheRing) {
  for (int size : {4, 8, 16, 64}) {
    for (int self = 0; self < size; ++self) {
      const CheckNeighbours n = SignatureCheckNeighbours(self, size);
      EXPECT_EQ(std::bitset<32>(static_cast<unsigned>(self ^ n.next)).count(), 1u)
          << "size " << size << ", daemon " << self << " -> " << n.next;
    }
  }
  const int gray8[] = {0, 1, 3, 2, 6, 7, 5, 4};
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(SignatureCheckNeighbours(gray8[i], 8).next, gray8[(i + 1) % 8]);
  }
  for (int size : {2, 3, 5, 6, 12}) {
    for (int self = 0; self < size; ++self) {
      EXPECT_EQ(SignatureCheckNeighbours(self, size).next, (self + 1) % size);
      EXPECT_EQ(SignatureCheckNeighbours(self, size).prev, (self + size - 1) % size);
    }
  }
}

}  // namespace
}  // namespace baton::collective
