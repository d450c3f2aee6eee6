#!/usr/bin/env bash
# What libbaton.so shows the world: SONAME libbaton.so.0, only baton_* symbols defined and
# exported, none of the libraries it is built from (gRPC, protobuf, absl, spdlog, fmt), and no
# text relocations (it is position-independent).
#
# Usage: library_symbols_test.sh <path of libbaton.so>
set -euo pipefail

lib=${1:?usage: library_symbols_test.sh <path of libbaton.so>}
if [[ ! -f $lib ]]; then
  echo "FAIL: no library at $lib (build the baton_shared target)" >&2
  exit 1
fi
for tool in readelf nm; do
  command -v "$tool" >/dev/null || { echo "FAIL: $tool is not installed" >&2; exit 1; }
done

failures=0
fail() {
  echo "FAIL: $*" >&2
  failures=$((failures + 1))
}

dynamic=$(readelf -d "$lib")

soname=$(sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p' <<<"$dynamic")
if [[ $soname != libbaton.so.0 ]]; then
  fail "SONAME is '${soname}', expected libbaton.so.0"
fi

if grep -q 'TEXTREL' <<<"$dynamic"; then
  fail "the library has text relocations (not position-independent):"
  grep 'TEXTREL' <<<"$dynamic" >&2
fi
# A DT_FLAGS entry can say TEXTREL too; readelf -d prints it in the FLAGS line, covered above.

# Every defined dynamic symbol: "<address> <type> <name>[@version]".
defined=$(nm -D --defined-only "$lib" | awk '{print $NF}' | sed 's/@.*//')
# The version node itself (BATON_0) is an absolute symbol that nm may list; it is not code.
exported=$(grep -v '^BATON_0$' <<<"$defined" | sort -u || true)
count=$(grep -c . <<<"$exported" || true)
if [[ $count -eq 0 ]]; then
  fail "no symbols exported"
fi

others=$(grep -v '^baton_' <<<"$exported" || true)
if [[ -n $others ]]; then
  fail "exports $(grep -c . <<<"$others") symbols without the baton_ prefix:"
  sed 's/^/  /' <<<"$others" >&2
fi

# Also demangled, so that e.g. _ZN4absl... or _ZN6google8protobuf... are caught by name.
leaked=$(nm -D --defined-only -C "$lib" | grep -Ei 'grpc|protobuf|absl|spdlog|fmt|google' || true)
if [[ -n $leaked ]]; then
  fail "defines symbols of the libraries it is built from:"
  sed 's/^/  /' <<<"$leaked" >&2
fi

# Every function the header declares is exported (a missing one would fail users at link time).
header=$(dirname "$0")/../../client/include/baton/baton.h
if [[ -f $header ]]; then
  declared=$(grep -oE 'BATON_API [^(]*\bbaton_[a-z0-9_]+\(' "$header" | grep -oE 'baton_[a-z0-9_]+\($' |
             tr -d '(' | sort -u)
  missing=$(comm -23 <(echo "$declared") <(echo "$exported"))
  if [[ -n $missing ]]; then
    fail "declared in baton.h but not exported:"
    sed 's/^/  /' <<<"$missing" >&2
  fi
  undeclared=$(comm -13 <(echo "$declared") <(echo "$exported"))
  if [[ -n $undeclared ]]; then
    fail "exported but not declared in baton.h:"
    sed 's/^/  /' <<<"$undeclared" >&2
  fi
fi

if [[ $failures -gt 0 ]]; then
  echo "library_symbols_test: $failures check(s) failed for $lib" >&2
  exit 1
fi
echo "library_symbols_test: $lib: SONAME $soname, $count exported symbols, all baton_*," \
  "no dependency symbols, no TEXTREL"
