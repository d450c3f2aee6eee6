#include "collective/double_binary_tree.h"

#include <bit>

// Tree 0 is a binary tree over the participants laid out by their bits (see the header); tree 1
// reuses it under a relabelling. Mirroring (even size) maps the even, interior participants of
// tree 0 onto odd ones, so each participant is interior in exactly one tree. For odd size the
// mirror would keep parity, hence the shift; the shift alone (NCCL's choice) leaves participant 0
// interior in both trees (its own place in tree 0, and size-1's place in tree 1). So 0 moves to
// a leaf first: NCCL's root 0 has one child only, which can take its place as the root, and
// size-1, even, has one child only, so 0 can hang under it (as its lower, first child). Moving 0
// from depth 0 to below size-1 adds at most one level.

namespace baton::collective {
namespace {

// NCCL's ncclGetBtree: participant `rank`'s links in the binary tree rooted at 0.
TreeNode NcclBinaryTree(int size, int rank) {
  TreeNode node;
  if (rank == 0) {
    if (size > 1) {
      node.children.push_back(static_cast<int>(std::bit_floor(static_cast<unsigned>(size - 1))));
    }
    return node;
  }
  const int bit = rank & -rank;
  node.parent = (rank ^ bit) | (bit << 1);
  if (node.parent >= size) node.parent = rank ^ bit;
  if (bit > 1) {
    node.children.push_back(rank - bit / 2);
    for (int step = bit / 2; step >= 1; step /= 2) {
      if (rank + step < size) {
        node.children.push_back(rank + step);
        break;
      }
    }
  }
  return node;
}

// Tree 0: NCCL's, with 0 moved under size-1 for odd size >= 3.
TreeNode Tree0(int size, int rank) {
  if (size % 2 == 0 || size < 3) return NcclBinaryTree(size, rank);
  if (rank == 0) return TreeNode{size - 1, {}};
  TreeNode node = NcclBinaryTree(size, rank);
  if (rank == DoubleBinaryTreeRoot(size, 0)) node.parent = -1;  // was 0's only child
  if (rank == size - 1) node.children.insert(node.children.begin(), 0);
  return node;
}

}  // namespace

std::array<TreeNode, 2> DoubleBinaryTree(int size, int rank) {
  std::array<TreeNode, 2> trees;
  trees[0] = Tree0(size, rank);
  // Tree 1: participant `rank` takes the place of `role` in tree 0; `from_role` maps back.
  const bool shift = size % 2 == 1;
  const int role = shift ? (rank - 1 + size) % size : size - 1 - rank;
  auto from_role = [&](int r) { return shift ? (r + 1) % size : size - 1 - r; };
  const TreeNode mirrored = Tree0(size, role);
  trees[1].parent = mirrored.parent == -1 ? -1 : from_role(mirrored.parent);
  for (int child : mirrored.children) trees[1].children.push_back(from_role(child));
  return trees;
}

int DoubleBinaryTreeRoot(int size, int tree) {
  const bool odd = size % 2 == 1;
  // Tree 0's root: 0, or for odd size >= 3 0's only child in NCCL's tree.
  const int root0 =
      odd && size >= 3 ? static_cast<int>(std::bit_floor(static_cast<unsigned>(size - 1))) : 0;
  if (tree == 0) return root0;
  return odd ? (root0 + 1) % size : size - 1 - root0;
}

}  // namespace baton::collective
