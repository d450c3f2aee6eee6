#include "collective/double_binary_tree.h"

#include <bit>

// Tree 0 is a binary tree over the participants laid out by their bits (see the header); tree 1
// reuses it under a relabelling. Mirroring (even size) maps the even, interior participants of
// tree 0 onto odd ones, so each participant is interior in exactly one tree; for odd size the
// mirror would keep parity, hence the shift, which leaves only participant 0 interior in both.

namespace baton::collective {
namespace {

TreeNode BinaryTree(int size, int rank) {
  TreeNode node;
  if (rank == 0) {
    if (size > 1) node.children.push_back(static_cast<int>(std::bit_floor(unsigned(size - 1))));
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

}  // namespace

std::array<TreeNode, 2> DoubleBinaryTree(int size, int rank) {
  std::array<TreeNode, 2> trees;
  trees[0] = BinaryTree(size, rank);
  // Tree 1: participant `rank` takes the place of `role` in tree 0; `from_role` maps back.
  const bool shift = size % 2 == 1;
  const int role = shift ? (rank - 1 + size) % size : size - 1 - rank;
  auto from_role = [&](int r) { return shift ? (r + 1) % size : size - 1 - r; };
  const TreeNode mirrored = BinaryTree(size, role);
  trees[1].parent = mirrored.parent == -1 ? -1 : from_role(mirrored.parent);
  for (int child : mirrored.children) trees[1].children.push_back(from_role(child));
  return trees;
}

int DoubleBinaryTreeRoot(int size, int tree) {
  if (tree == 0) return 0;
  return size % 2 == 1 && size > 1 ? 1 : size - 1;
}

}  // namespace baton::collective
