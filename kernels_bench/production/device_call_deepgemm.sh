#!/usr/bin/env bash
# One device call for DeepGEMM's production kernels: build (or unpack a previous build), compile the JIT
# kernels in parallel, then check and time them into $OUT/production_results.* (run from the repository root):
#   DG_SRC=.deepgemm/src.tar.gz [DG_PREBUILT=.deepgemm/dg_build.tar.gz] COMMIT=<sha> \
#   FAMILIES=dg_indexer_prefill,dg_indexer_decode [LIMIT=560] [FWD=1] bash kernels_bench/production/device_call_deepgemm.sh
# WARM: the JIT units to compile first (default: those of FAMILIES). Writes $OUT/dg_build.tar.gz (the built
# library and its JIT cache) for the next call to carry as DG_PREBUILT.
# SITE (optional): a .tar.xz of the other production packages, unpacked (sgl-flash-mla, tile-kernels and
# their needs, as device_call.sh lists; the machine has no zstd, Python's tarfile reads xz) for families
# and tests that need them. TESTS=1: every GPU-marked test of the repository first (`pytest -m gpu`), log in
# $OUT/gpu_tests.txt, at most TEST_TIMEOUT s; TEST_ARGS narrows it.
set -o pipefail
export PYTHONUNBUFFERED=1 CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
DG_DIR=${DG_DIR:-/tmp/dg}
t0=$(date +%s)
SITE_PATH=
if [ -n "${SITE:-}" ]; then
  mkdir -p /tmp/site
  [ -f /tmp/site/flash_mla/__init__.py ] || python3 -c "import sys, tarfile; tarfile.open(sys.argv[1]).extractall('/tmp/site')" "$SITE"
  SITE_PATH=/tmp/site:
  echo "site unpacked in $(( $(date +%s) - t0 )) s"
fi
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
export NVCC_VERSION=$("$CUDA_HOME/bin/nvcc" --version | grep -o "release [0-9.]*, V[0-9.]*")
export DEEPGEMM_COMMIT=${DEEPGEMM_COMMIT:-54e2261}
echo "nvcc: $NVCC_VERSION"
# build (or unpack DG_PREBUILT), then check that the JIT compiles and runs one small kernel
DG_DIR=$DG_DIR bash kernels_bench/production/build_deepgemm.sh > "$OUT/deepgemm_build.txt" 2>&1
tail -3 "$OUT/deepgemm_build.txt"
PYTHONPATH=$DG_DIR/DeepGEMM:$PWD DG_JIT_CACHE_DIR=$DG_DIR/jit timeout 300 python3 -c "
import torch, deep_gemm
a = torch.randn(8, 1024, device='cuda').bfloat16(); b = torch.randn(24, 1024, device='cuda')
d = torch.empty(8, 24, device='cuda'); s = torch.empty(8, device='cuda')
deep_gemm.tf32_hc_prenorm_gemm(a, b, d, s); torch.cuda.synchronize()
print('JIT ok, max err', (d - a.float() @ b.T).abs().max().item())" || { echo "DeepGEMM JIT failed"; exit 1; }
export PYTHONPATH=$SITE_PATH$DG_DIR/DeepGEMM:$PWD DG_JIT_CACHE_DIR=$DG_DIR/jit
python3 -c "import deep_gemm, torch; print('deep_gemm', deep_gemm.__version__, 'torch', torch.__version__, 'sms', deep_gemm.get_num_sms())" || exit 1
[ -z "$SITE_PATH" ] || python3 -c "import flash_mla, tile_kernels, tilelang; print('flash_mla', flash_mla.__version__, 'tilelang', tilelang.__version__)" 2>&1 | tail -1
echo "ready in $(( $(date +%s) - t0 )) s"
FAMILIES=${FAMILIES:-dg_indexer_prefill,dg_indexer_decode}
if [ -z "${WARM+x}" ]; then
  WARM=$(python3 -c "
from kernels_bench.production.deepgemm import warm_units
fams = '$FAMILIES'.split(',')
print(' '.join(u for u in warm_units() if u.split(':')[0] in fams))")
fi
t1=$(date +%s)
printf '%s\n' $WARM | xargs -P "${WARM_JOBS:-12}" -I{} timeout "${WARM_TIMEOUT:-240}" \
  python3 -m kernels_bench.production.run --out /tmp/warm --warm {} > "$OUT/deepgemm_warm.txt" 2>&1
echo "warm rc=$? in $(( $(date +%s) - t1 )) s ($(echo $WARM | wc -w) units)"; grep -i -m5 "error\|assert" "$OUT/deepgemm_warm.txt"
if [ "${TESTS:-0}" = 1 ]; then
  t2=$(date +%s)
  # --confcutdir: the root conftest imports sim (pydantic etc., not on the machine); the gpu marker and its
  # skip are in pyproject.toml and tests/kernels_bench/conftest.py
  timeout "${TEST_TIMEOUT:-300}" python3 -m pytest -q -m gpu -p no:cacheprovider --confcutdir=tests/kernels_bench \
    -o addopts="" -rA ${TEST_ARGS:-tests/kernels_bench} 2>&1 | tee "$OUT/gpu_tests.txt" | grep -E "passed|failed|PASSED|FAILED|SKIPPED|ERROR|Error" | tail -40
  echo "tests in $(( $(date +%s) - t2 )) s"
fi
# the families get what is left of LIMIT (s, whole script), less 40 s to pack the build
BUDGET=${BUDGET:-$(( ${LIMIT:-560} - ($(date +%s) - t0) - 40 ))}
echo "budget $BUDGET s"
python3 -m kernels_bench.production.run --out "$OUT" --commit "${COMMIT:-unknown}" \
  --families "$FAMILIES" --budget-s "$BUDGET" 2>&1 | grep -v "ok=True" | tail -40
grep "ok=True" "$OUT/production_log.txt" | sed -E 's/ +/ /g' | cut -c1-170 | tail -${SHOW:-60}
if [ "${FWD:-0}" = 1 ]; then  # the forward pass (needs SITE): its mHC boundaries use DeepGEMM's pre-norm GEMM
  python3 -m kernels_bench.production.forward --out "$OUT" --commit "${COMMIT:-unknown}" \
    --budget-s "${FWD_BUDGET:-200}" 2>&1 | tail -30
fi
[ "${PACK:-1}" = 1 ] && ( cd "$DG_DIR" && tar czf "$OUT/dg_build.tar.gz" --exclude=DeepGEMM/build DeepGEMM jit )
ls -la "$OUT"
echo "total $(( $(date +%s) - t0 )) s"
