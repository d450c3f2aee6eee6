#!/usr/bin/env bash
# Sets up, builds and runs every test: unit and integration tests, the same again under
# AddressSanitizer + UndefinedBehaviorSanitizer, the transport and collective tests under
# ThreadSanitizer, and the format check. Exits non-zero on any failure.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh

step() { printf '\n=== %s ===\n' "$*"; }

step "format check"
bash scripts/format.sh --check

step "build (warnings are errors)"
bash scripts/build.sh build
step "tests"
(cd build && ctest --output-on-failure --timeout 300 -j 2)

step "build with AddressSanitizer + UndefinedBehaviorSanitizer"
bash scripts/build.sh build-asan -DBATON_SANITIZE=address,undefined
step "tests under ASan + UBSan"
(cd build-asan && ASAN_OPTIONS=detect_leaks=1 ctest --output-on-failure --timeout 600 -j 2)

step "build transport and collective tests with ThreadSanitizer"
if [ ! -f build-tsan/build.ninja ]; then
  cmake -S . -B build-tsan -G Ninja -DBATON_WERROR=ON -DBATON_SANITIZE=thread >/dev/null
fi
tsan_tests=(transport_frame_test transport_conformance_test transport_inmemory_test
  transport_tcp_test transport_tag_test transport_receive_matcher_test reduce_test
  ring_all_reduce_test)
cmake --build build-tsan -j "$(nproc)" --target "${tsan_tests[@]}"
step "transport and collective tests under TSan"
(cd build-tsan && ctest --output-on-failure --timeout 600 -j 2 \
  -R "^($(IFS='|'; echo "${tsan_tests[*]}"))\$")
