#!/usr/bin/env bash
# VERSION is Baton's one version: the build was configured with it (project() reads it, so the
# package and the image carry it), and the DaemonSet's image is baton/batond:<VERSION>, the tag
# deploy/container/build.sh builds. kustomization.yaml must not retag that image to anything else.
# Usage: version_test.sh SOURCE_DIR CONFIGURED_VERSION
set -euo pipefail
source_dir=$1
configured=$2
fail() { echo "FAIL: $*" >&2; exit 1; }

version=$(cat "$source_dir/VERSION")
[[ $version =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] || fail "VERSION is '$version', not MAJOR.MINOR.PATCH"
[ "$(wc -l < "$source_dir/VERSION")" -eq 1 ] || fail "VERSION must be one line"
[ "$configured" = "$version" ] ||
  fail "the build was configured with version $configured, VERSION says $version (re-run cmake)"

# Every image of the DaemonSet (quotes allowed around the value).
daemonset=$source_dir/deploy/k8s/daemonset.yaml
mapfile -t images < <(sed -n "s/^[[:space:]-]*image:[[:space:]]*[\"']\{0,1\}\([^\"' ]*\).*/\1/p" "$daemonset")
[ ${#images[@]} -eq 1 ] || fail "$daemonset has ${#images[@]} image references, expected 1"
[ "${images[0]}" = "baton/batond:$version" ] ||
  fail "$daemonset runs image '${images[0]}', expected baton/batond:$version (VERSION): set the tag to VERSION"

# kustomize may retag it only to VERSION (an overlay may point it at a registry).
kustomization=$source_dir/deploy/k8s/kustomization.yaml
tags=$(sed -n "s/^[[:space:]]*newTag:[[:space:]]*[\"']\{0,1\}\([^\"' ]*\).*/\1/p" "$kustomization")
for tag in $tags; do
  [ "$tag" = "$version" ] || fail "$kustomization sets newTag $tag, VERSION is $version"
done
echo "VERSION $version: configured build and DaemonSet image baton/batond:$version agree"
