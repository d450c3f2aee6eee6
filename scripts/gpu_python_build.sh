#!/usr/bin/env bash
# Builds the Python package `baton` (the extension _C and the PyTorch backend _c10d) from this
# tree's sources with the C++ compiler alone, against a prebuilt libbaton.so and the given
# interpreter's own torch and pybind11. For the GPU machine (scripts/gpu_check.sh run): its
# python3 (3.12, torch 2.11.0+cu130) is not the build machine's, so the extensions are compiled
# there, and CMake there lacks our -dev packages; the build machine's CMake build
# (python/CMakeLists.txt) stays the reference for flags and sources.
#
# Usage: scripts/gpu_python_build.sh LIBDIR INCLUDEDIR OUTDIR [PYTHON]
#   LIBDIR      holds libbaton.so.0 (the extensions find it there through their RUNPATH)
#   INCLUDEDIR  holds the generated baton/version.h (build/client/include here)
#   OUTDIR      gets baton/ (the .py files and both extensions): PYTHONPATH=OUTDIR imports it
#   PYTHON      the interpreter (default python3)
# Prints the compile commands' failures and exits non-zero if either extension fails.
set -euo pipefail

[[ $# -ge 3 ]] || { sed -n '2,16p' "$0" >&2; exit 2; }
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
LIBDIR=$(cd "$1" && pwd)
INCLUDEDIR=$(cd "$2" && pwd)
OUTDIR=$3
PYTHON=${4:-python3}
CXX=${CXX:-g++}

[[ -e $LIBDIR/libbaton.so.0 ]] || { echo "error: no libbaton.so.0 in $LIBDIR" >&2; exit 1; }
mkdir -p "$OUTDIR/baton"
OUTDIR=$(cd "$OUTDIR" && pwd)
ln -sf libbaton.so.0 "$LIBDIR/libbaton.so" 2>/dev/null || true

mapfile -t facts < <("$PYTHON" - <<'EOF'
import os, sysconfig
import torch
print(sysconfig.get_paths()["include"])
print(sysconfig.get_config_var("EXT_SUFFIX"))
print(os.path.dirname(torch.__file__))
print(int(torch._C._GLIBCXX_USE_CXX11_ABI))
try:
    import pybind11
    print(pybind11.get_include())
except ImportError:
    print("")
EOF
)
if [[ ${#facts[@]} -lt 4 ]]; then
  echo "error: $PYTHON cannot import torch (or sysconfig); the package needs both" >&2
  exit 1
fi
py_include=${facts[0]}
suffix=${facts[1]}
torch_dir=${facts[2]}
abi=${facts[3]}
pybind_include=${facts[4]:-$torch_dir/include}
cuda_include=()
for dir in "${CUDA_HOME:-/usr/local/cuda}/include" /usr/local/cuda/include; do
  if [[ -e $dir/cuda_runtime_api.h ]]; then cuda_include=(-isystem "$dir"); break; fi
done

compile=(-std=c++20 -O2 -fPIC -fvisibility=hidden -fvisibility-inlines-hidden
         -I "$ROOT" -I "$ROOT/client/include" -I "$INCLUDEDIR" -isystem "$py_include")
torch_flags=(-isystem "$torch_dir/include" -isystem "$torch_dir/include/torch/csrc/api/include"
             "${cuda_include[@]}" -DTORCH_EXTENSION_NAME=_c10d -D_GLIBCXX_USE_CXX11_ABI="$abi")

cp "$ROOT"/python/baton/*.py "$ROOT"/python/baton/py.typed "$OUTDIR/baton/" 2>/dev/null || true
# The metadata `pip install` would write, so that torch finds the `torch.backends` entry point
# (baton/torch.py's _autoload), as python/CMakeLists.txt does in the build tree.
version=$(head -n 1 "$ROOT/VERSION" 2>/dev/null || true)
dist=$OUTDIR/baton-${version:-0}.dist-info
mkdir -p "$dist"
printf 'Metadata-Version: 2.1\nName: baton\nVersion: %s\n' "${version:-0}" >"$dist/METADATA"
printf '[torch.backends]\nbaton = baton.torch:_autoload\n' >"$dist/entry_points.txt"
objects=$OUTDIR/objects
mkdir -p "$objects"

c_sources=(bindings buffers client communicator errors request)
c10d_sources=(c10d_module c10d_backend c10d_work)
torch_libs=()
for lib in torch torch_cpu c10 torch_python c10_cuda torch_cuda; do
  [[ -e $torch_dir/lib/lib$lib.so ]] && torch_libs+=("$torch_dir/lib/lib$lib.so")
done

# Every source compiles in parallel (the machine has the cores); then each extension links.
start=$SECONDS
pids=()
for name in "${c_sources[@]}"; do
  "$CXX" "${compile[@]}" -isystem "$pybind_include" -c "$ROOT/python/src/$name.cc" \
    -o "$objects/$name.o" 2>"$objects/$name.log" &
  pids+=($!)
done
for name in "${c10d_sources[@]}"; do
  "$CXX" "${compile[@]}" "${torch_flags[@]}" -c "$ROOT/python/src/$name.cc" \
    -o "$objects/$name.o" 2>"$objects/$name.log" &
  pids+=($!)
done
rc=0
for i in "${!pids[@]}"; do
  wait "${pids[$i]}" || rc=1
done
if [[ $rc -ne 0 ]]; then
  for log in "$objects"/*.log; do
    [[ -s $log ]] && { echo "== $log"; head -c 8000 "$log"; }
  done
  echo "error: compiling the Python extensions failed" >&2
  exit 1
fi
# Libraries after the objects: the toolchain may link --as-needed.
c_objects=()
for name in "${c_sources[@]}"; do c_objects+=("$objects/$name.o"); done
c10d_objects=()
for name in "${c10d_sources[@]}"; do c10d_objects+=("$objects/$name.o"); done
"$CXX" -shared "${c_objects[@]}" -L "$LIBDIR" -lbaton -Wl,-rpath,"$LIBDIR" \
  -o "$OUTDIR/baton/_C$suffix" || rc=1
"$CXX" -shared "${c10d_objects[@]}" -L "$LIBDIR" -lbaton "${torch_libs[@]}" \
  -Wl,-rpath,"$LIBDIR" -Wl,-rpath,"$torch_dir/lib" -o "$OUTDIR/baton/_c10d$suffix" || rc=1
echo "python package in $OUTDIR/baton ($suffix, torch at $torch_dir): $((SECONDS - start)) s"
exit $rc
