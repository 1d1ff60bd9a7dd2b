#!/usr/bin/env bash
# Build DeepGEMM from source on the device machine (its develop.sh steps), into $DG_DIR (default /tmp/dg).
#   DG_SRC=.deepgemm/src.tar.zst bash kernels_bench/production/build_deepgemm.sh
# DG_SRC: a tar.zst holding DeepGEMM/ (commit 54e2261: setup.py, csrc, deep_gemm, scripts) with
# third-party/cutlass/include (f3fde58) and third-party/fmt/include (553ec11), exported with `git archive`
# (kernels_bench/production/README in hwprofiles/h200/README.md says how). Reuses a build already there.
# DG_PREBUILT (optional): a tar.zst of a previous build's DeepGEMM/ folder (the .so and the JIT cache).
set -e -o pipefail
DG_DIR=${DG_DIR:-/tmp/dg}
export CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
if [ -f "$DG_DIR/DeepGEMM/deep_gemm/_C.so" ] || ls "$DG_DIR"/DeepGEMM/deep_gemm/_C*.so >/dev/null 2>&1; then
  echo "deepgemm: reusing the build in $DG_DIR"; exit 0
fi
mkdir -p "$DG_DIR"
if [ -n "${DG_PREBUILT:-}" ] && [ -f "$DG_PREBUILT" ]; then
  zstd -q -d -c "$DG_PREBUILT" | tar x -C "$DG_DIR"
  if python3 -c "import sys; sys.path.insert(0, '$DG_DIR/DeepGEMM'); import deep_gemm" 2>/dev/null; then
    echo "deepgemm: unpacked the prebuilt library"; exit 0
  fi
  echo "deepgemm: the prebuilt library does not load; building"
fi
zstd -q -d -c "$DG_SRC" | tar x -C "$DG_DIR"
cd "$DG_DIR/DeepGEMM"
ln -sfn "$PWD/third-party/cutlass/include/cutlass" deep_gemm/include/cutlass
ln -sfn "$PWD/third-party/cutlass/include/cute" deep_gemm/include/cute
t0=$(date +%s)
MAX_JOBS=${MAX_JOBS:-16} python3 setup.py build > build.log 2>&1 || { tail -60 build.log; exit 1; }
so=$(find build -name "_C*.so" -type f | head -n 1)
[ -n "$so" ] || { echo "deepgemm: no _C*.so after the build"; tail -40 build.log; exit 1; }
cp "$so" deep_gemm/
echo "deepgemm: built $so in $(( $(date +%s) - t0 )) s"
