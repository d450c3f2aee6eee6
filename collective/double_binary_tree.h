#pragma once

// The double binary tree of NCCL (src/graph/trees.cc, ncclGetBtree / ncclGetDtree): two binary
// trees over the same participants 0 .. size-1, each of which carries half of a tree
// all-reduce's data.
//
// Tree 0 alternates leaves and interior nodes: every odd participant is a leaf. Root 0 has one
// child, the largest power of two below size. A participant r > 0 whose lowest set bit is b has
// as parent r with bit b cleared and bit 2b set when that is below size, else r with bit b
// cleared; when b > 1 it has children r - b/2 and r + h, where h is the largest of b/2, b/4,
// ..., 1 with r + h < size (no second child when there is none). For size 14:
//
//   0 - 8;  8 - 4, 12;  4 - 2, 6;  12 - 10, 13;  2 - 1, 3;  6 - 5, 7;  10 - 9, 11
//
// Tree 1 is tree 0 mirrored (participant r plays the role of size-1-r) when size is even, and
// shifted by one (r plays the role of r-1 mod size) when size is odd. So tree 1's root is size-1
// (even size) or 1 (odd size > 1).
//
// What the construction guarantees (tested in double_binary_tree_test.cc):
// - each tree contains every participant exactly once, connected and acyclic, one root;
// - both trees have depth bit_width(size-1) (= floor(log2(size-1)) + 1) for size >= 2, so
//   O(log size); every node has at most two children;
// - even size: every participant is interior (has children) in exactly one tree and a leaf in
//   the other, so the two halves' reductions load different participants;
// - odd size >= 3: the same holds for every participant except 0, which is interior in both
//   trees (it is 0's and, shifted, size-1's place); size 1: a lone root, a leaf in both.

#include <array>
#include <vector>

namespace baton::collective {

// One participant's links in one tree.
struct TreeNode {
  int parent = -1;            // -1 at the root
  std::vector<int> children;  // zero, one or two participants, in ascending order in tree 0

  friend bool operator==(const TreeNode&, const TreeNode&) = default;
};

// Participant `rank`'s links in tree 0 and tree 1 of the double binary tree over `size`
// participants (0 <= rank < size). Pure and cheap: O(log size).
std::array<TreeNode, 2> DoubleBinaryTree(int size, int rank);

// The root of tree `tree` (0 or 1) over `size` (>= 1) participants.
int DoubleBinaryTreeRoot(int size, int tree);

}  // namespace baton::collective
