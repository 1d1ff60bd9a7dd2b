#!/usr/bin/env bash
# Build DeepGEMM from source on the device machine (its develop.sh steps), into $DG_DIR (default /tmp/dg).
#   DG_SRC=.deepgemm/src.tar.gz bash kernels_bench/production/build_deepgemm.sh
# DG_SRC: a tar.gz holding DeepGEMM/ (commit 54e2261: setup.py, csrc, deep_gemm, scripts) with
# third-party/cutlass/include (f3fde58) and third-party/fmt/include (553ec11), exported with `git archive`
# (kernels_bench/production/README in hwprofiles/h200/README.md says how). Reuses a build already there.
# DG_PREBUILT (optional): a tar.gz of a previous build's DeepGEMM/ folder (the .so and the JIT cache).
set -e -o pipefail
DG_DIR=${DG_DIR:-/tmp/dg}
HERE=$(cd "$(dirname "$0")" && pwd)
DG_SRC=${DG_SRC:+$(realpath "$DG_SRC")}
export CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
if [ -f "$DG_DIR/DeepGEMM/deep_gemm/_C.so" ] || ls "$DG_DIR"/DeepGEMM/deep_gemm/_C*.so >/dev/null 2>&1; then
  echo "deepgemm: reusing the build in $DG_DIR"; exit 0
fi
mkdir -p "$DG_DIR"
if [ -n "${DG_PREBUILT:-}" ] && [ -f "$DG_PREBUILT" ]; then
  tar xzf "$DG_PREBUILT" -C "$DG_DIR"
  if python3 -c "import sys; sys.path.insert(0, '$DG_DIR/DeepGEMM'); import deep_gemm" 2>/dev/null; then
    echo "deepgemm: unpacked the prebuilt library"; exit 0
  fi
  echo "deepgemm: the prebuilt library does not load; building"
fi
tar xzf "$DG_SRC" -C "$DG_DIR"
cd "$DG_DIR/DeepGEMM"
# DG_NOREGEX=1: replace DeepGEMM's std::regex uses by string scans (deepgemm_noregex.py says why)
[ "${DG_NOREGEX:-0}" = 1 ] && python3 "$HERE/deepgemm_noregex.py" "$PWD"
ln -sfn ../../third-party/cutlass/include/cutlass deep_gemm/include/cutlass  # relative: the build moves
ln -sfn ../../third-party/cutlass/include/cute deep_gemm/include/cute
t0=$(date +%s)
# -Bsymbolic: the extension binds its own template instances (std::regex's among them) rather than
# the same-named weak symbols of libtorch, built by another compiler
# LDSHARED / CC / CXX: the system g++, not the interpreter's sysconfig link line (DG_LINK=sysconfig keeps it)
if [ "${DG_LINK:-gxx}" = gxx ]; then export CC=gcc CXX=g++ LDSHARED="g++ -shared"; fi
LDFLAGS="${LDFLAGS:-} -Wl,-Bsymbolic" MAX_JOBS=${MAX_JOBS:-16} python3 setup.py build > build.log 2>&1 || { tail -60 build.log; exit 1; }
so=$(find build -name "_C*.so" -type f | head -n 1)
[ -n "$so" ] || { echo "deepgemm: no _C*.so after the build"; tail -40 build.log; exit 1; }
cp "$so" deep_gemm/
echo "deepgemm: built $so in $(( $(date +%s) - t0 )) s"
