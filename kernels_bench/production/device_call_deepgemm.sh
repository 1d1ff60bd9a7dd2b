#!/usr/bin/env bash
# One device call for DeepGEMM's production kernels: build (or unpack a previous build), compile the JIT
# kernels in parallel, then check and time them into $OUT/production_results.* (run from the repository root):
#   DG_SRC=.deepgemm/src.tar.zst [DG_PREBUILT=.deepgemm/dg_build.tar.zst] COMMIT=<sha> \
#   FAMILIES=dg_indexer_prefill,dg_indexer_decode [LIMIT=560] bash kernels_bench/production/device_call_deepgemm.sh
# WARM: the JIT units to compile first (default: those of FAMILIES). Writes $OUT/dg_build.tar.zst (the built
# library and its JIT cache) for the next call to carry as DG_PREBUILT.
set -o pipefail
export PYTHONUNBUFFERED=1 CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
DG_DIR=${DG_DIR:-/tmp/dg}
t0=$(date +%s)
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
export NVCC_VERSION=$("$CUDA_HOME/bin/nvcc" --version | grep -o "release [0-9.]*, V[0-9.]*")
export DEEPGEMM_COMMIT=${DEEPGEMM_COMMIT:-54e2261}
echo "nvcc: $NVCC_VERSION"
DG_DIR=$DG_DIR bash kernels_bench/production/build_deepgemm.sh 2>&1 | tee "$OUT/deepgemm_build.txt" | tail -30
[ "${PIPESTATUS[0]}" = 0 ] || { echo "deepgemm build failed"; exit 1; }
export PYTHONPATH=$DG_DIR/DeepGEMM:$PWD DG_JIT_CACHE_DIR=$DG_DIR/jit
python3 -c "import deep_gemm, torch; print('deep_gemm', deep_gemm.__version__, 'torch', torch.__version__, 'sms', deep_gemm.get_num_sms())" || exit 1
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
# the families get what is left of LIMIT (s, whole script), less 40 s to pack the build
BUDGET=${BUDGET:-$(( ${LIMIT:-560} - ($(date +%s) - t0) - 40 ))}
echo "budget $BUDGET s"
python3 -m kernels_bench.production.run --out "$OUT" --commit "${COMMIT:-unknown}" \
  --families "$FAMILIES" --budget-s "$BUDGET" 2>&1 | grep -v "ok=True" | tail -40
grep "ok=True" "$OUT/production_log.txt" | sed -E 's/ +/ /g' | cut -c1-170 | tail -${SHOW:-60}
( cd "$DG_DIR" && tar cf - --exclude=DeepGEMM/build DeepGEMM jit 2>/dev/null | zstd -q -3 -T8 -o "$OUT/dg_build.tar.zst" )
ls -la "$OUT"
echo "total $(( $(date +%s) - t0 )) s"
