#!/usr/bin/env bash
# One device call for SGLang's V4.1 Hopper prefill indexer tables (docs/engines_and_validation.md sections 53-54,
# 58): both variants on the GPU the call landed on, or nothing where that GPU's tables are already measured
# (ONLY=h200 skips any other GPU, so a call that lands on an H100 costs no benchmark time). From the repo root:
#   COMMIT=<sha> ONLY=h200 bash kernels_bench/production/device_call_indexer.sh
set -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
t0=$(date +%s)
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem,power.limit --format=csv,noheader | tee "$OUT/gpu.txt"
if [ -n "${ONLY:-}" ] && ! echo "$gpu" | grep -qi "$ONLY"; then
  echo "landed on '$gpu', not $ONLY: nothing run"; exit 0
fi
for variant in torch fused; do
  python3 -m kernels_bench.production.sglang_v41_indexer --out "$OUT/$variant" --variant "$variant" \
    --commit "${COMMIT:-unknown}" --budget-s "${BUDGET:-240}" 2>&1 | tee "$OUT/$variant.log" | tail -4
done
echo "total $(( $(date +%s) - t0 )) s"
