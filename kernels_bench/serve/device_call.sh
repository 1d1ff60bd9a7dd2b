#!/usr/bin/env bash
# One device call for the served reduced model: unpack the production packages (as
# kernels_bench/production/device_call.sh does), the GPU tests of the served model, then its correctness
# check and step-time table (kernels_bench.serve.bench; BENCH_ARGS="--spec deepseek-v4.1-flash-mini" for the
# V4.1 mini, TEST_FILES for its GPU test), and, with RUN="...", an engine command after it.
# Run from the repository root on the device machine:
#   SITE=../.whl/site.tar.zst bash kernels_bench/serve/device_call.sh
# Everything goes to $OUT (logs are tee'd so a timeout keeps them).
set -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
t0=$(date +%s)
TESTS=0 FAMILIES= FWD=0 bash kernels_bench/production/device_call.sh
export PYTHONPATH=/tmp/site:$PWD
if [ "${TESTS:-1}" = 1 ]; then
  SERVE_CHECK_JSON="$OUT/serve_check.json" SERVE_CHECK41_JSON="$OUT/serve_check41.json" \
    timeout "${TEST_TIMEOUT:-300}" python3 -m pytest -q -s \
    -p no:cacheprovider --confcutdir=tests/kernels_bench -k "${TEST_K:-production}" \
    ${TEST_FILES:-tests/kernels_bench/test_serve_model.py} 2>&1 | tee "$OUT/serve_gpu_tests.txt" | tail -25
fi
if [ "${BENCH:-1}" = 1 ]; then
  timeout "${BENCH_TIMEOUT:-300}" python3 -m kernels_bench.serve.bench --out "$OUT" --commit "${COMMIT:-unknown}" \
    --budget-s "${BUDGET:-200}" --skip-check ${BENCH_ARGS:-} 2>&1 | tail -60
fi
if [ -n "${RUN:-}" ]; then
  bash -c "$RUN" 2>&1 | tee "$OUT/run_log.txt" | tail -40
fi
echo "total $(( $(date +%s) - t0 )) s"
