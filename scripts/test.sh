#!/usr/bin/env bash
# Sets up, builds and runs every test: the format check, unit and integration tests (with the
# Python package and the PyTorch backend's tests, label python, on the venv's torch, and the layer
# rule of docs/architecture.md, label lint: scripts/check_layers.py), clang-tidy
# over every source outside tests/ (scripts/tidy.sh), the libFuzzer targets for a bounded time
# (scripts/fuzz.sh), the same tests again under
# AddressSanitizer + UndefinedBehaviorSanitizer, and the tests labelled tsan (transport,
# collective and the daemon's threads) under ThreadSanitizer. Exits non-zero on any failure.
set -euo pipefail
cd "$(dirname "$0")/.."

# Each stage's name and start; the time each took is printed at the end, whatever the outcome.
stages=() starts=()
step() {
  stages+=("$*")
  starts+=("$SECONDS")
  printf '\n=== %s (%s UTC) ===\n' "$*" "$(date -u +%H:%M:%S)"
}
report() {
  local status=$? i end
  printf '\n=== stage times (exit %d) ===\n' "$status"
  for i in "${!stages[@]}"; do
    end=$SECONDS
    [ $((i + 1)) -lt ${#stages[@]} ] && end=${starts[$((i + 1))]}
    printf '%6d s  %s\n' $((end - starts[i])) "${stages[$i]}"
  done
  printf '%6d s  in all\n' "$SECONDS"
}
trap report EXIT

step "set up (apt, the venv)"
bash scripts/setup.sh

step "format check"
bash scripts/format.sh --check

step "build (warnings are errors)"
bash scripts/build.sh build
step "tests"
(cd build && BATON_DEBUG_LOCKS=1 ctest --output-on-failure --timeout 300 -j 2)

step "clang-tidy (.clang-tidy; any finding fails)"
bash scripts/tidy.sh build

step "fuzz what peers and ranks send (libFuzzer, ${BATON_FUZZ_SECONDS:-30} s per target)"
bash scripts/fuzz.sh

step "build with AddressSanitizer + UndefinedBehaviorSanitizer"
# Without CUDA: device code cannot be instrumented, the GPU tests skip without a GPU anyway, and
# nvcc's minutes are better spent elsewhere (the plain build above compiled the CUDA code).
bash scripts/build.sh build-asan -DBATON_SANITIZE=address,undefined -DBATON_WITH_CUDA=OFF
step "tests under ASan + UBSan"
(cd build-asan && BATON_DEBUG_LOCKS=1 ASAN_OPTIONS=detect_leaks=1 ctest --output-on-failure --timeout 600 -j 2)

step "build the tests labelled tsan with ThreadSanitizer"
if [ ! -f build-tsan/build.ninja ]; then
  cmake -S . -B build-tsan -G Ninja -DBATON_WERROR=ON -DBATON_SANITIZE=thread \
    $(command -v ccache >/dev/null && [ "${BATON_CCACHE:-1}" != 0 ] &&
      echo -DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache) >/dev/null
fi
# The tests labelled "tsan" (transport, collective, and the daemon's rendezvous and link
# monitor); a test's name is its target's name.
mapfile -t tsan_tests < <(cd build-tsan && ctest -N -L tsan | sed -n 's/^ *Test *#[0-9]*: *//p')
[ ${#tsan_tests[@]} -gt 0 ] || { echo "no tests labelled tsan"; exit 1; }
cmake --build build-tsan -j "$(nproc)" --target "${tsan_tests[@]}"
step "tests labelled tsan under TSan"
(cd build-tsan && ctest --output-on-failure --timeout 900 -j 2 -L tsan)
step "done"
