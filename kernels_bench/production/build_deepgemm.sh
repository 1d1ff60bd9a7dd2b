#!/usr/bin/env bash
# Build DeepGEMM from source on the device machine (its develop.sh steps), into $DG_DIR (default /tmp/dg).
#   DG_SRC=.deepgemm/src.tar.gz bash kernels_bench/production/build_deepgemm.sh
# DG_SRC: a tar.gz holding DeepGEMM/ (commit 54e2261: setup.py, csrc, deep_gemm, scripts) with
# third-party/cutlass/include (f3fde58) and third-party/fmt/include (553ec11), exported with `git archive`
# (kernels_bench/production/README in hwprofiles/h200/README.md says how). Reuses a build already there.
# DG_PREBUILT (optional): a tar.gz of a previous build's DeepGEMM/ folder (the .so and the JIT cache).
set -e -o pipefail
DG_DIR=${DG_DIR:-/tmp/dg}
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
ln -sfn ../../third-party/cutlass/include/cutlass deep_gemm/include/cutlass  # relative: the build moves
ln -sfn ../../third-party/cutlass/include/cute deep_gemm/include/cute
t0=$(date +%s)
# Link with the system g++: torch's extension builder picked the image's /opt/gcc/bin/g++, which put a
# second copy of libstdc++'s locale code into _C.so; the JIT then crashed in std::regex (segfault in
# std::collate<char>::transform at the first kernel, 2026-12-03). -Bsymbolic binds the extension's own
# template instances rather than same-named weak symbols of libtorch.
export CC=gcc CXX=g++ LDSHARED="g++ -shared"
LDFLAGS="${LDFLAGS:-} -Wl,-Bsymbolic" MAX_JOBS=${MAX_JOBS:-16} python3 setup.py build > build.log 2>&1 || { tail -60 build.log; exit 1; }
so=$(find build -name "_C*.so" -type f | head -n 1)
[ -n "$so" ] || { echo "deepgemm: no _C*.so after the build"; tail -40 build.log; exit 1; }
cp "$so" deep_gemm/
echo "deepgemm: built $so in $(( $(date +%s) - t0 )) s"
