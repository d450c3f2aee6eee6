#!/usr/bin/env bash
# Builds the libFuzzer targets of tests/fuzz with clang (ASan + UBSan, coverage-instrumented) in
# build-fuzz/ and runs each for a bounded time: what untrusted peers and ranks send (frame
# headers and handshake payloads, both sides of the data handshake, operations over gRPC and the
# submission channel, the session socket, every handler of the daemon's client and peer APIs, and
# the shared memory ranks write and the daemon reads: the node arena and the channel page). Any
# crash, sanitizer report, leak or hang fails the run; the input that caused it is left in
# build-fuzz/ (crash-*, leak-*, timeout-*). Corpora grow in build-fuzz/corpus/ between
# runs; targets that have seed inputs write them there first (BATON_FUZZ_SEEDS).
#   BATON_FUZZ_SECONDS  seconds per target (default 30)
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${BATON_FUZZ_SECONDS:-30}
targets=(frame_fuzz handshake_fuzz op_codec_fuzz session_fuzz proto_handlers_fuzz shared_memory_fuzz)
if [ ! -f build-fuzz/build.ninja ]; then
  CC=clang CXX=clang++ cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DBATON_FUZZ=ON -DBATON_WITH_CUDA=OFF >/dev/null
fi
cmake --build build-fuzz -j "$(nproc)" --target "${targets[@]}"
for target in "${targets[@]}"; do
  corpus=build-fuzz/corpus/$target
  mkdir -p "$corpus"
  flags=()
  case $target in
    # A whole batond runs in it, whose threads allocate and free while an input runs.
    # libFuzzer's per-input leak check (-detect_leaks) re-runs every input whose mallocs and
    # frees do not pair up under a full LeakSanitizer scan: nearly every input here, eleven times
    # slower (420 against 4,700 inputs a second). The target shuts its daemon down at exit
    # instead, where LeakSanitizer still checks the whole process.
    proto_handlers_fuzz) flags+=(-detect_leaks=0) ;;
  esac
  echo "fuzz: $target for ${seconds} s"
  (cd build-fuzz && BATON_FUZZ_SEEDS="corpus/$target" "./bin/$target" \
    -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
    "${flags[@]}" "corpus/$target" 2>"$target.log") || {
    echo "fuzz: $target failed; the end of build-fuzz/$target.log:"
    tail -40 "build-fuzz/$target.log"
    exit 1
  }
  grep -E "^stat::number_of_executed_units|^stat::new_units_added" "build-fuzz/$target.log" |
    sed "s/^/fuzz: $target /"
done
