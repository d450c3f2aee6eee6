# shellcheck shell=bash
# Sourced by compare_allreduce.sh and sweep_ops.sh: the awk code both use to read their per-column
# result files. kReadSizeTablesAwk defines read_size_tables(list, dir): for each comma-separated
# name in `list` (column i), it reads dir/<name>.tsv, lines of "bytes value wrong", into
# col[i] = name, t[i, bytes] = value and bad[i, bytes] = wrong; fills order[1..ns] with every
# size that occurs, ascending, and sets ns; returns the number of columns. Prepend it to a
# program: awk "$kReadSizeTablesAwk"'BEGIN { n = read_size_tables(...) ... }'.
# shellcheck disable=SC2034  # used by the scripts that source this file
readonly kReadSizeTablesAwk='
function read_size_tables(list, dir,    n, i, file, line, f, s, sizes, a, b, x) {
  n = split(list, col, ",")
  for (i = 1; i <= n; i++) {
    file = dir "/" col[i] ".tsv"
    while ((getline line < file) > 0) {
      split(line, f, " ")
      t[i, f[1]] = f[2]; bad[i, f[1]] = f[3] + 0; sizes[f[1]] = 1
    }
    close(file)
  }
  ns = 0
  for (s in sizes) order[++ns] = s + 0
  for (a = 2; a <= ns; a++) for (b = a; b > 1 && order[b - 1] > order[b]; b--) {
    x = order[b]; order[b] = order[b - 1]; order[b - 1] = x
  }
  return n
}
'
