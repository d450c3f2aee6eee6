# Shared by the cluster tests (sourced, not run): `fail`, and `start_cluster_dir`, which skips the
# test (exit 77) where network namespaces cannot be created, makes the cluster's directory in $dir
# and tears the cluster down when the test exits. Needs $netns_cluster (scripts/netns_cluster.sh).

fail() {
  echo "FAIL: $*" >&2
  exit 1
}

start_cluster_dir() {
  local status=0
  bash "$netns_cluster" check || status=$?
  [ $status -eq 0 ] || exit $status # 77: skipped
  dir=$(mktemp -d /tmp/baton-netns-XXXXXX)
  trap cleanup_cluster EXIT
}

cleanup_cluster() {
  bash "$netns_cluster" down --dir "$dir" --grace 5 || true
  rm -rf -- "$dir"
}
