#include "collective/double_binary_tree.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <bit>
#include <vector>

namespace baton::collective {
namespace {

// Parent of every participant in tree `tree` over `size` participants.
std::vector<int> Parents(int size, int tree) {
  std::vector<int> parents;
  for (int r = 0; r < size; ++r) parents.push_back(DoubleBinaryTree(size, r)[tree].parent);
  return parents;
}

// The trees NCCL's src/graph/trees.cc draws in its comments, for even sizes.
TEST(DoubleBinaryTreeTest, EvenSizesMatchNcclsIllustrations) {
  // The binary tree over 14 ranks (tree 0).
  EXPECT_EQ(Parents(14, 0), (std::vector<int>{-1, 2, 4, 2, 8, 6, 4, 6, 0, 10, 12, 10, 8, 12}));
  EXPECT_EQ(DoubleBinaryTree(14, 0)[0].children, (std::vector<int>{8}));
  EXPECT_EQ(DoubleBinaryTree(14, 8)[0].children, (std::vector<int>{4, 12}));
  EXPECT_EQ(DoubleBinaryTree(14, 12)[0].children, (std::vector<int>{10, 13}));
  // Its mirror (tree 1): root 13 - 5; 5 - 9, 1 (the images of 8's children 4, 12).
  EXPECT_EQ(DoubleBinaryTreeRoot(14, 1), 13);
  EXPECT_EQ(DoubleBinaryTree(14, 13)[1], (TreeNode{-1, {5}}));
  EXPECT_EQ(DoubleBinaryTree(14, 5)[1], (TreeNode{13, {9, 1}}));
  // The mirror over 12 ranks: root 11 - 3; 3 - 1, 7; 1 - 0, 2; 7 - 5, 9; 5 - 4, 6; 9 - 8, 10.
  EXPECT_EQ(Parents(12, 1), (std::vector<int>{1, 3, 1, 11, 5, 7, 5, 3, 9, 7, 9, -1}));
}

// Odd sizes: NCCL's tree with 0 moved under size-1, so that 0 is not interior in both trees.
TEST(DoubleBinaryTreeTest, OddSizesMoveZeroToALeaf) {
  // Size 13, tree 0: root 8 - 4, 12; 4 - 2, 6; 12 - 0, 10; 2 - 1, 3; 6 - 5, 7; 10 - 9, 11.
  EXPECT_EQ(DoubleBinaryTreeRoot(13, 0), 8);
  EXPECT_EQ(Parents(13, 0), (std::vector<int>{12, 2, 4, 2, 8, 6, 4, 6, -1, 10, 12, 10, 8}));
  EXPECT_EQ(DoubleBinaryTree(13, 12)[0].children, (std::vector<int>{0, 10}));
  EXPECT_EQ(DoubleBinaryTree(13, 0)[0], (TreeNode{12, {}}));
  // Tree 1, shifted by one: root 9 - 5, 0; 5 - 3, 7; 0 - 1, 11; 3 - 2, 4; 7 - 6, 8; 11 - 10, 12.
  EXPECT_EQ(DoubleBinaryTreeRoot(13, 1), 9);
  EXPECT_EQ(Parents(13, 1), (std::vector<int>{9, 0, 3, 5, 3, 9, 7, 5, 7, -1, 11, 0, 11}));
  EXPECT_EQ(DoubleBinaryTree(13, 0)[1].children, (std::vector<int>{1, 11}));
  // Size 5: tree 0 is 4 - 0, 2; 2 - 1, 3, and tree 1 is rooted at 0 (4's image).
  EXPECT_EQ(DoubleBinaryTree(5, 4)[0], (TreeNode{-1, {0, 2}}));
  EXPECT_EQ(DoubleBinaryTree(5, 0)[0], (TreeNode{4, {}}));
  EXPECT_EQ(DoubleBinaryTreeRoot(5, 0), 4);
  EXPECT_EQ(DoubleBinaryTreeRoot(5, 1), 0);
}

TEST(DoubleBinaryTreeTest, SmallSizes) {
  EXPECT_EQ(DoubleBinaryTree(1, 0), (std::array<TreeNode, 2>{TreeNode{-1, {}}, TreeNode{-1, {}}}));
  EXPECT_EQ(DoubleBinaryTreeRoot(1, 0), 0);
  EXPECT_EQ(DoubleBinaryTreeRoot(1, 1), 0);
  // Two participants: 0 - 1 and its mirror 1 - 0.
  EXPECT_EQ(DoubleBinaryTree(2, 0), (std::array<TreeNode, 2>{TreeNode{-1, {1}}, TreeNode{1, {}}}));
  EXPECT_EQ(DoubleBinaryTree(2, 1), (std::array<TreeNode, 2>{TreeNode{0, {}}, TreeNode{-1, {0}}}));
  // Three: 2 - 0, 1, shifted: 0 - 1, 2.
  EXPECT_EQ(Parents(3, 0), (std::vector<int>{2, 2, -1}));
  EXPECT_EQ(DoubleBinaryTree(3, 2)[0].children, (std::vector<int>{0, 1}));
  EXPECT_EQ(Parents(3, 1), (std::vector<int>{-1, 0, 0}));
}

// Every property the header promises, for every size up to 1024.
TEST(DoubleBinaryTreeTest, ValidBalancedTreesWithDisjointInteriors) {
  for (int size = 1; size <= 1024; ++size) {
    SCOPED_TRACE(::testing::Message() << "size " << size);
    std::vector<std::array<TreeNode, 2>> nodes;
    for (int r = 0; r < size; ++r) nodes.push_back(DoubleBinaryTree(size, r));
    // Odd sizes are one level shallower: 0, NCCL's root, is a leaf below size-1 instead.
    const bool odd = size % 2 == 1 && size >= 3;
    const int expected_depth = std::bit_width(static_cast<unsigned>(size - 1)) - (odd ? 1 : 0);
    for (int t = 0; t < 2; ++t) {
      SCOPED_TRACE(::testing::Message() << "tree " << t);
      const int root = DoubleBinaryTreeRoot(size, t);
      std::vector<int> times_a_child(size, 0);
      int roots = 0;
      int depth = 0;
      for (int r = 0; r < size; ++r) {
        const TreeNode& node = nodes[r][t];
        if (node.parent == -1) {
          ++roots;
          EXPECT_EQ(r, root);
        } else {
          ASSERT_GE(node.parent, 0);
          ASSERT_LT(node.parent, size);
          ASSERT_NE(node.parent, r);
          const std::vector<int>& siblings = nodes[node.parent][t].children;
          EXPECT_EQ(std::count(siblings.begin(), siblings.end(), r), 1)
              << r << " is not a child of its parent " << node.parent;
        }
        EXPECT_LE(node.children.size(), 2u);
        for (int child : node.children) {
          ASSERT_GE(child, 0);
          ASSERT_LT(child, size);
          ++times_a_child[child];
          EXPECT_EQ(nodes[child][t].parent, r) << child << "'s parent is not " << r;
        }
        // Walking up reaches the root within size steps: connected and acyclic.
        int steps = 0;
        for (int at = r; nodes[at][t].parent != -1; at = nodes[at][t].parent) {
          ASSERT_LT(++steps, size) << "cycle above " << r;
        }
        depth = std::max(depth, steps);
      }
      EXPECT_EQ(roots, 1);
      for (int r = 0; r < size; ++r) EXPECT_EQ(times_a_child[r], r == root ? 0 : 1) << r;
      EXPECT_EQ(depth, expected_depth);
    }
    if (size > 1) {
      EXPECT_NE(DoubleBinaryTreeRoot(size, 0), DoubleBinaryTreeRoot(size, 1));
    }
    // No participant is interior (has children) in both trees. Even sizes: each is interior in
    // exactly one, tree 0 holding the even ones. Odd sizes: the same, with 0 interior in tree 1
    // only and 1 a leaf in both.
    for (int r = 0; r < size; ++r) {
      const bool interior0 = !nodes[r][0].children.empty();
      const bool interior1 = !nodes[r][1].children.empty();
      EXPECT_FALSE(interior0 && interior1) << "participant " << r << " is interior in both";
      if (size == 1) {
        EXPECT_FALSE(interior0 || interior1);
      } else if (size % 2 == 0) {
        EXPECT_EQ(interior0, r % 2 == 0) << "participant " << r;
        EXPECT_NE(interior0, interior1) << "participant " << r;
      } else {
        EXPECT_EQ(interior0, r % 2 == 0 && r != 0) << "participant " << r;
        EXPECT_EQ(interior1, r == 0 || (r % 2 == 1 && r != 1)) << "participant " << r;
      }
    }
  }
}

// batond builds the trees over ring positions, so that a subtree stays within a stretch of the
// ring (a rack, when the ring keeps racks contiguous): every subtree must be one arc of the ring.
TEST(DoubleBinaryTreeTest, EverySubtreeIsOneArcOfTheRing) {
  for (int size = 1; size <= 300; ++size) {
    SCOPED_TRACE(::testing::Message() << "size " << size);
    std::vector<std::array<TreeNode, 2>> nodes;
    for (int r = 0; r < size; ++r) nodes.push_back(DoubleBinaryTree(size, r));
    for (int t = 0; t < 2; ++t) {
      // in_subtree[a][r]: r is a itself or below it (walking up from r reaches a).
      std::vector<std::vector<bool>> in_subtree(size, std::vector<bool>(size, false));
      for (int r = 0; r < size; ++r) {
        int steps = 0;
        for (int at = r; at != -1 && steps <= size; at = nodes[at][t].parent, ++steps) {
          in_subtree[at][r] = true;
        }
      }
      for (int a = 0; a < size; ++a) {
        // An arc of the ring: the whole ring, or exactly one member whose successor is outside.
        int ends = 0;
        int members = 0;
        for (int r = 0; r < size; ++r) {
          members += in_subtree[a][r] ? 1 : 0;
          if (in_subtree[a][r] && !in_subtree[a][(r + 1) % size]) ++ends;
        }
        EXPECT_EQ(ends, members == size ? 0 : 1) << "tree " << t << ", the subtree of " << a;
      }
    }
  }
  // So with 8 racks of 16 contiguous positions, only a few tree edges cross racks.
  for (int t = 0; t < 2; ++t) {
    int crossing = 0;
    for (int r = 0; r < 128; ++r) {
      const int parent = DoubleBinaryTree(128, r)[t].parent;
      if (parent != -1 && parent / 16 != r / 16) ++crossing;
    }
    EXPECT_LE(crossing, 2 * 8) << "tree " << t;
  }
}

}  // namespace
}  // namespace baton::collective
