#pragma once

// The double binary tree of NCCL (src/graph/trees.cc, ncclGetBtree / ncclGetDtree): two binary
// trees over the same participants 0 .. size-1, each of which carries half of a tree
// all-reduce's data. The one construction in Baton: batond builds its trees across daemons with
// it too (over ring positions, so that subtrees are contiguous stretches of the ring).
//
// NCCL's binary tree alternates leaves and interior nodes: every odd participant is a leaf. Root
// 0 has one child, the largest power of two below size. A participant r > 0 whose lowest set bit
// is b has as parent r with bit b cleared and bit 2b set when that is below size, else r with bit
// b cleared; when b > 1 it has children r - b/2 and r + h, where h is the largest of b/2, b/4,
// ..., 1 with r + h < size (no second child when there is none). For size 14:
//
//   0 - 8;  8 - 4, 12;  4 - 2, 6;  12 - 10, 13;  2 - 1, 3;  6 - 5, 7;  10 - 9, 11
//
// Even size: tree 0 is that tree and tree 1 its mirror (participant r plays the role of
// size-1-r), rooted at size-1. Odd size >= 3: tree 0 is that tree with participant 0 moved to a
// leaf, so that no participant is interior in both trees (NCCL's shift alone leaves 0 interior
// in both): 0's only child, bit_floor(size-1), becomes the root, and 0 becomes the first child of
// size-1 (which, even, has one child only). For size 13:
//
//   8 - 4, 12;  4 - 2, 6;  12 - 0, 10;  2 - 1, 3;  6 - 5, 7;  10 - 9, 11
//
// Tree 1 is then tree 0 shifted by one (r plays the role of r-1 mod size), rooted at
// bit_floor(size-1) + 1 mod size. Size 1: a lone root in both trees.
//
// What the construction guarantees (tested in double_binary_tree_test.cc):
// - each tree contains every participant exactly once, connected and acyclic, one root; the two
//   roots differ for size >= 2;
// - depth bit_width(size-1) (= ceil(log2 size)) for even size, one less for odd size, so
//   O(log size); every node has at most two children;
// - no participant is interior (has children) in both trees, for every size. Even size: each is
//   interior in exactly one tree (tree 0: the even ones). Odd size >= 3: each is interior in
//   exactly one tree (tree 0: the even ones but 0; tree 1: 0 and the odd ones but 1) except 1,
//   a leaf in both.

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
