#!/usr/bin/env bash
# The one prepared check for a machine with one NVIDIA H200 (the device tool's `nvidia-h200`).
# That machine has nvcc, CMake, ninja and PyTorch but none of our -dev packages (gRPC, protobuf,
# absl, spdlog, ...) and no internet, so the C++ binaries and every shared library they need
# travel from here; only the Python extensions are compiled there (against its own python3).
#
# Step 1, here (the build machine, after a normal build into build/):
#     bash scripts/gpu_check.sh bundle            # -> .gpu-bundle/ (git-ignored via .git/info/exclude)
#   Copies build/bin/batond and the programs of TESTS below (debug info stripped) into the
#   bundle, their non-system shared libraries and libbaton.so.0 into .gpu-bundle/lib, the
#   generated baton/version.h into .gpu-bundle/include, writes .gpu-bundle/MANIFEST (commit,
#   date, glibc, compiled-in BATOND_PATH) and prints the bundle's size, which must stay under
#   64 MiB, and packs it into .gpu-bundle.tar.xz, which is what travels (the tool's carry limit,
#   64 MiB, counts the working tree too).
#
# Step 2, the device tool's `run` call:
#     carry: [".gpu-bundle.tar.xz"]   (the folder packed: about 11 MiB instead of 59)
#     command: bash scripts/gpu_check.sh run .gpu-bundle.tar.xz
#     timeout_s: 480
#   Prints date -u, the MANIFEST and nvidia-smi's name/driver/memory; starts building the Python
#   package there in the background (scripts/gpu_python_build.sh: the machine's python3 is 3.12,
#   not ours, so the extensions are compiled against its torch); then runs, each under a time
#   limit, with LD_LIBRARY_PATH=.gpu-bundle/lib:
#     cuda_device_test, cuda_kernels_test   BATON_REQUIRE_GPU=1: a missing GPU fails, not skips
#     host_fake_test, device_test           the protocol on the fake (device_test starts batond
#                                           from its compiled-in BATOND_PATH, linked here)
#     device_collectives_check              every collective x type x op on device memory, 2 and
#                                           4 rank processes on the one GPU, checked bit for bit
#     cuda_kernels_bench                    reduce kernels' bandwidth against cudaMemcpy
#     device_bench                          all_reduce bus bandwidth at 256 MiB, 8 B stream
#                                           latency, compute/collective overlap
#     gpu_torch_check                       tests/python/gpu_torch_check.py: CUDA tensors through
#                                           the c10d backend, stream order, DDP
#   Each step's log goes to $OUT/<name>.log (else DIR/logs/<name>.log); the end prints one line
#   per step, PASS / FAIL (rc N) / SKIP, and the script exits non-zero if any failed.
#   Run here (no GPU), `run` prints "no nvidia-smi", the CUDA steps skip, the device programs
#   run on the fake, and it exits 0 when they pass:
#     bash scripts/gpu_check.sh bundle /tmp/gb && OUT=/tmp/gbout bash scripts/gpu_check.sh run /tmp/gb

set -euo pipefail

usage() {
  echo "usage: $0 bundle [DIR]   # here: pack binaries + libraries into DIR (default .gpu-bundle)" >&2
  echo "       $0 run [DIR]      # on the GPU machine: run the GPU tests from DIR" >&2
  exit 2
}

[[ $# -ge 1 ]] || usage
MODE=$1
DIR=${2:-.gpu-bundle}
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"

TESTS=(cuda_device_test cuda_kernels_test host_fake_test device_test device_collectives_check
       cuda_kernels_bench device_bench)
LIMIT_BYTES=$((64 * 1024 * 1024))

# A library from ldd that every machine already has (glibc, the C++ runtime, the loader).
is_system_lib() {
  case "$(basename "$1")" in
    libc.so.* | libm.so.* | libpthread.so.* | libdl.so.* | librt.so.* | libutil.so.* | \
      libresolv.so.* | libanl.so.* | libnsl.so.* | libmvec.so.* | ld-linux*.so.* | \
      libstdc++.so.* | libgcc_s.so.* | linux-vdso.so.* | libcuda.so.* | libnvidia-*.so.*)
      return 0 ;;
  esac
  return 1
}

os_name() {
  sed -n 's/^PRETTY_NAME="\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' /etc/os-release 2>/dev/null || echo unknown
}

find_binary() {
  local name=$1 path
  if [[ $name == batond && -x build/bin/batond ]]; then
    echo build/bin/batond
    return
  fi
  path=$(find build -name "$name" -type f -perm -u+x 2>/dev/null | head -n 1)
  [[ -n $path ]] || return 1
  echo "$path"
}

bundle() {
  [[ -d build ]] || { echo "error: no build/ tree here; build first (scripts/build.sh)" >&2; exit 1; }

  local missing=()
  for name in batond "${TESTS[@]}"; do
    find_binary "$name" >/dev/null || missing+=("$name")
  done
  if [[ ${#missing[@]} -gt 0 ]]; then
    echo "building missing targets: ${missing[*]}"
    cmake --build build --target "${missing[@]}"
  fi

  # Ignore the default bundle folder locally (not in .gitignore: other people edit that).
  local exclude
  exclude=$(git rev-parse --git-path info/exclude)
  mkdir -p "$(dirname "$exclude")"
  local pattern
  for pattern in '/.gpu-bundle/' '/.gpu-bundle.tar.xz'; do
    if ! grep -qxF "$pattern" "$exclude" 2>/dev/null; then
      echo "$pattern" >>"$exclude"
      echo "added $pattern to $exclude"
    fi
  done

  rm -rf "$DIR"
  mkdir -p "$DIR/lib"

  local name src
  for name in batond "${TESTS[@]}"; do
    src=$(find_binary "$name")
    cp "$src" "$DIR/$name"
    strip --strip-debug "$DIR/$name"
    chmod +x "$DIR/$name"
    printf '  %-18s <- %s\n' "$name" "$src"
  done

  # Every non-system shared library any of them needs, resolved here by ldd (transitively).
  local lib
  while read -r lib; do
    if is_system_lib "$lib"; then continue; fi
    cp -L "$lib" "$DIR/lib/$(basename "$lib")"
    strip --strip-debug "$DIR/lib/$(basename "$lib")" 2>/dev/null || true
  done < <(for name in batond "${TESTS[@]}"; do
             ldd "$DIR/$name" | awk '$2 == "=>" && $3 ~ /^\// {print $3}'
           done | sort -u)
  # The Python package is compiled on the GPU machine (its python3 is another version) against
  # libbaton.so and the generated version header, which travel here.
  [[ -e build/lib/libbaton.so.0 ]] || cmake --build build --target baton_shared
  cp -L build/lib/libbaton.so.0 "$DIR/lib/libbaton.so.0"
  strip --strip-debug "$DIR/lib/libbaton.so.0"
  mkdir -p "$DIR/include/baton"
  cp build/client/include/baton/version.h "$DIR/include/baton/version.h"
  for name in batond "${TESTS[@]}"; do
    if ldd "$DIR/$name" | grep -q 'not found'; then
      echo "error: $name has unresolved libraries here:" >&2
      ldd "$DIR/$name" | grep 'not found' >&2
      exit 1
    fi
  done

  local batond_path
  batond_path=$(strings "$DIR/device_test" | grep -m 1 '/bin/batond$' || true)
  {
    echo "commit: $(git rev-parse HEAD)$(git diff --quiet HEAD -- 2>/dev/null || echo ' (+ uncommitted changes)')"
    echo "bundled: $(date -u '+%Y-%m-%dT%H:%M:%SZ')"
    echo "built on: $(os_name), $(ldd --version | head -n 1)"
    echo "batond_path: ${batond_path:-unknown}"
    echo "binaries: batond ${TESTS[*]}"
    echo "libraries: $(find "$DIR/lib" -type f | wc -l)"
  } >"$DIR/MANIFEST"

  # The folder alone comes near the carry limit (which the working tree shares), so it travels
  # as one xz tarball, a sixth of its size; `run` unpacks it.
  local bytes packed
  bytes=$(du -sb "$DIR" | cut -f1)
  echo "bundle $DIR: $(find "$DIR/lib" -type f | wc -l) libraries, $((bytes / 1024 / 1024)) MiB ($bytes bytes)"
  du -sh "$DIR"/* | sort -h | tail -n 6 | sed 's/^/  /'
  tar -C "$(dirname "$DIR")" -cf - "$(basename "$DIR")" | xz -6 -T0 >"$DIR.tar.xz"
  packed=$(stat -c %s "$DIR.tar.xz")
  echo "packed: $DIR.tar.xz, $((packed / 1024 / 1024)) MiB ($packed bytes)"
  if ((packed >= LIMIT_BYTES / 2)); then
    echo "error: the packed bundle is over 32 MiB; with the working tree it may not be carried" >&2
    exit 1
  fi
  echo "next: device run with carry [\"$DIR.tar.xz\"], command 'bash scripts/gpu_check.sh run $DIR.tar.xz', timeout_s 480"
}

# Unpacks a packed bundle (DIR.tar.xz) beside /tmp and points DIR at it; python3 unpacks it
# where there is no xz.
unpack() {
  [[ $DIR == *.tar.xz ]] || return 0
  [[ -f $DIR ]] || { echo "error: no packed bundle at $DIR" >&2; exit 1; }
  local into name
  into=$(mktemp -d /tmp/baton-gpu-XXXXXX)
  name=$(basename "$DIR" .tar.xz)
  if command -v xz >/dev/null 2>&1; then
    tar -C "$into" -xJf "$DIR"
  else
    python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' "$DIR" "$into"
  fi
  DIR=$into/$name
  echo "unpacked into $DIR"
}

# Puts batond where device_test looks for it: build/bin/batond and the absolute path compiled in.
place_batond() {
  local target
  local -a targets=(build/bin/batond)
  target=$(sed -n 's/^batond_path: //p' "$DIR/MANIFEST" 2>/dev/null || true)
  [[ -n $target && $target != unknown ]] && targets+=("$target")
  for target in "${targets[@]}"; do
    if [[ -x $target ]]; then
      echo "batond: $target already there, left as is"
      continue
    fi
    mkdir -p "$(dirname "$target")"
    ln -sf "$(cd "$DIR" && pwd)/batond" "$target"
    echo "batond: linked $target -> $DIR/batond"
  done
}

# One step of the run: NAME LIMIT_S KIND COMMAND...; KIND "gtest" reads gtest's summary (any
# skipped case is a SKIP: on the H200 a skipped CUDA test checked nothing), "program" reads the
# exit status (77 = SKIP). Appends to summary[] and sets failed=1 on a failure.
step() {
  local name=$1 limit=$2 kind=$3 rc log passed skipped
  shift 3
  log=$logs/$name.log
  echo "== $name (log: $log)"
  set +e
  timeout "$limit" "$@" >"$log" 2>&1
  rc=$?
  set -e
  if [[ $kind == gtest ]]; then
    tail -n 4 "$log" | sed 's/^/  /'
  else
    tail -n 40 "$log" | sed 's/^/  /'
  fi
  passed=$(sed -n 's/^\[  PASSED  \] \([0-9]*\) test.*/\1/p' "$log" | tail -n 1)
  skipped=$(sed -n 's/^\[  SKIPPED \] \([0-9]*\) test.*/\1/p' "$log" | tail -n 1)
  if ((rc == 77)) && [[ $kind == program ]]; then
    summary+=("SKIP $name (device unavailable)")
  elif ((rc != 0)); then
    failed=1
    if ((rc == 124)); then
      summary+=("FAIL $name (timed out after $limit s)")
    else
      summary+=("FAIL $name (rc $rc)")
    fi
  elif [[ ${skipped:-0} != 0 ]]; then
    summary+=("SKIP $name ($skipped skipped, ${passed:-0} passed)")
  else
    summary+=("PASS $name")
  fi
}

run_tests() {
  unpack
  [[ -d $DIR ]] || { echo "error: no bundle at $DIR (carry it, or run '$0 bundle $DIR' first)" >&2; exit 1; }
  logs=${OUT:-$DIR/logs}
  mkdir -p "$logs"
  local start=$SECONDS
  local gpu=1 device=cuda

  echo "== date -u: $(date -u)"
  echo "== MANIFEST"
  cat "$DIR/MANIFEST" 2>/dev/null || echo "(no MANIFEST in $DIR)"
  echo "== GPU"
  if command -v nvidia-smi >/dev/null 2>&1; then
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv || echo "nvidia-smi failed (rc $?)"
  else
    echo "no nvidia-smi"
    gpu=0
  fi
  echo "== here: $(os_name), $(ldd --version | head -n 1)"

  place_batond

  local bundle libdir python
  bundle=$(cd "$DIR" && pwd)
  libdir=$bundle/lib
  export LD_LIBRARY_PATH="$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  python=${BATON_GPU_PYTHON:-python3}
  summary=()
  failed=0

  # The Python package compiles (16 cores) while the C++ checks run.
  local pydir=$logs/python
  echo "== building the Python package in the background (log: $logs/python_build.log)"
  bash "$ROOT/scripts/gpu_python_build.sh" "$libdir" "$bundle/include" "$pydir" "$python" \
    >"$logs/python_build.log" 2>&1 &
  local python_build=$!

  # Without a GPU the CUDA tests must skip rather than fail: require the GPU only where there
  # is a driver to require it of.
  local -a require=()
  ((gpu)) && require=(env BATON_REQUIRE_GPU=1)
  ((gpu)) || device=fake
  step cuda_device_test 120 gtest "${require[@]}" "$DIR/cuda_device_test" --gtest_color=no
  step cuda_kernels_test 120 gtest "${require[@]}" "$DIR/cuda_kernels_test" --gtest_color=no
  step host_fake_test 60 gtest "$DIR/host_fake_test" --gtest_color=no
  step device_test 60 gtest "$DIR/device_test" --gtest_color=no
  step device_collectives_check 150 program "$DIR/device_collectives_check" \
    --device="$device" --batond="$bundle/batond" --ranks=2,4
  step cuda_kernels_bench 60 program "$DIR/cuda_kernels_bench"
  if [[ -x $DIR/device_bench ]]; then
    step device_bench 150 program "$DIR/device_bench" --device="$device" \
      --batond="$bundle/batond" --ranks=2,4
  fi

  echo "== waiting for the Python package"
  if wait "$python_build"; then
    tail -n 2 "$logs/python_build.log" | sed 's/^/  /'
    step gpu_torch_check 180 program env PYTHONPATH="$pydir" PYTHONUNBUFFERED=1 \
      "$python" "$ROOT/tests/python/gpu_torch_check.py" --daemon-device "$device" \
      --batond "$bundle/batond"
  else
    tail -n 30 "$logs/python_build.log" | sed 's/^/  /'
    summary+=("FAIL python package build (see python_build.log)")
    failed=1
  fi

  echo "== summary ($((SECONDS - start)) s)"
  printf '%s\n' "${summary[@]}"
  return "$failed"
}

case $MODE in
  bundle) bundle ;;
  run) run_tests ;;
  *) usage ;;
esac
