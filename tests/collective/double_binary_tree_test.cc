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

// The trees NCCL's src/graph/trees.cc draws in its comments.
TEST(DoubleBinaryTreeTest, MatchesNcclsIllustrations) {
  // The binary tree over 14 ranks (tree 0).
  EXPECT_EQ(Parents(14, 0), (std::vector<int>{-1, 2, 4, 2, 8, 6, 4, 6, 0, 10, 12, 10, 8, 12}));
  // Its mirror over 12 ranks (tree 1, even size): root 11 - 3; 3 - 1, 7; 1 - 0, 2; 7 - 5, 9;
  // 5 - 4, 6; 9 - 8, 10.
  EXPECT_EQ(Parents(12, 1), (std::vector<int>{1, 3, 1, 11, 5, 7, 5, 3, 9, 7, 9, -1}));
  // Shifted by one over 13 ranks (tree 1, odd size): root 1 - 9; 9 - 5, 0; 5 - 3, 7; 0 - 11;
  // 11 - 10, 12; 3 - 2, 4; 7 - 6, 8.
  EXPECT_EQ(Parents(13, 1), (std::vector<int>{9, -1, 3, 5, 3, 9, 7, 5, 7, 1, 11, 0, 11}));
  EXPECT_EQ(DoubleBinaryTree(14, 12)[0].children, (std::vector<int>{10, 13}));
  EXPECT_EQ(DoubleBinaryTree(13, 12)[0].children, (std::vector<int>{10}));
  EXPECT_EQ(DoubleBinaryTree(14, 0)[0].children, (std::vector<int>{8}));
}

TEST(DoubleBinaryTreeTest, SmallSizes) {
  EXPECT_EQ(DoubleBinaryTree(1, 0), (std::array<TreeNode, 2>{TreeNode{-1, {}}, TreeNode{-1, {}}}));
  // Two participants: 0 - 1 and its mirror 1 - 0.
  EXPECT_EQ(DoubleBinaryTree(2, 0), (std::array<TreeNode, 2>{TreeNode{-1, {1}}, TreeNode{1, {}}}));
  EXPECT_EQ(DoubleBinaryTree(2, 1), (std::array<TreeNode, 2>{TreeNode{0, {}}, TreeNode{-1, {0}}}));
  // Three: the chain 0 - 2 - 1, shifted: 1 - 0 - 2.
  EXPECT_EQ(Parents(3, 0), (std::vector<int>{-1, 2, 0}));
  EXPECT_EQ(Parents(3, 1), (std::vector<int>{1, -1, 0}));
}

// Every property the header promises, for every size up to 1024.
TEST(DoubleBinaryTreeTest, ValidBalancedTreesWithDisjointInteriors) {
  for (int size = 1; size <= 1024; ++size) {
    SCOPED_TRACE(::testing::Message() << "size " << size);
    std::vector<std::array<TreeNode, 2>> nodes;
    for (int r = 0; r < size; ++r) nodes.push_back(DoubleBinaryTree(size, r));
    const int expected_depth = std::bit_width(static_cast<unsigned>(size - 1));
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
    // Interior (has children) in at most one tree: always for even sizes; for odd sizes every
    // participant but 0, which is interior in both.
    for (int r = 0; r < size; ++r) {
      const bool interior0 = !nodes[r][0].children.empty();
      const bool interior1 = !nodes[r][1].children.empty();
      if (size == 1) {
        EXPECT_FALSE(interior0 || interior1);
      } else if (size % 2 == 0 || r != 0) {
        EXPECT_NE(interior0, interior1) << "participant " << r;
      } else {
        EXPECT_TRUE(interior0 && interior1) << "participant 0";
      }
      if (size > 1) {
        EXPECT_EQ(interior0, r % 2 == 0) << "participant " << r;
      }
    }
  }
}

}  // namespace
}  // namespace baton::collective
