#!/usr/bin/env bash
# One device call of the carry check (issue 28): measure on the device's GPU what the H200 tables hold, so
# that kernels_bench.carry_compare can set sim's committed predictions against it. Run from the repository
# root on the device machine:
#   SITE=.whl/site.tar.xz DG_SRC=.deepgemm/src.tar.gz STAGES=prod,dg,fwd COMMIT=<sha> bash kernels_bench/device_carry_check.sh
# STAGES (comma-separated, in this order):
#   prod   production.run attention, mhc, gemm_dense (FlashMLA, TileKernels, cuBLASLt; needs SITE)
#   dg     DeepGEMM built from DG_SRC (in the background while `prod` runs), its JIT units compiled in
#          parallel, then the dg_* families (indexer, MoE, dense, wo_a, pre-norm GEMM, verify-step indexer)
#   fwd    the forward-pass points (production.forward; needs SITE and, for its mHC boundary, DeepGEMM)
#   serve  both served minis' bench grids (serve.bench; needs SITE)
#   run    the V4 mini's real run on the committed trace (serve.run, as hwprofiles/h200/serve/run_20261203)
#   run41  the V4.1 mini's real run (as run_20261203_v41)
#   ours   kernels_bench's own tables (run_all --preset full, FAMILIES_OURS, BUDGET_OURS s)
#   moe    the forward pass's grouped GEMMs (torch) against DeepGEMM's at its MoE shapes (production.moe_grouped;
#          needs SITE and DeepGEMM)
#   host   the host's time to issue the eager production pass, op by op and per launch, and bare library calls
#          (production.host_issue; needs SITE and DeepGEMM; docs/carry/eager)
#   sync   the eager production pass with and without a host wait in every MoE layer, as DeepEP's normal dispatch
#          waits (production.sync_exposure; needs SITE and DeepGEMM; docs/carry/eager)
# SITE_DIR=<folder> instead of SITE: the site already unpacked there (the site beside the tracked tree is over one
# call's 64 MiB: carry it in two parts, each unpacked by its own call into an ignored folder such as .whl/u, which
# the warm machine keeps between calls; docs/carry/eager/README.md).
# Everything lands in $OUT: one results.tar.gz (tables, logs, run folders) plus this call's log.
set -o pipefail
export PYTHONUNBUFFERED=1 CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
R=/tmp/carry; mkdir -p "$R"
DG_DIR=${DG_DIR:-/tmp/dg}
STAGES=",${STAGES:-prod,dg,fwd},"
COMMIT=${COMMIT:-unknown}
t0=$(date +%s)
el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
has() { [[ "$STAGES" == *",$1,"* ]]; }
# packed after every stage, so that a call stopped at its time limit still returns what it measured
pack() { tar czf "$OUT/results.tar.gz" -C "$R" --exclude=warm . ; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem,memory.total --format=csv,noheader
if [ -n "${SITE_DIR:-}" ]; then
  ln -sfn "$(cd "$SITE_DIR" && pwd)" /tmp/site
elif [ -n "${SITE:-}" ] && [ ! -f /tmp/site/flash_mla/__init__.py ]; then
  mkdir -p /tmp/site
  if command -v xz >/dev/null; then xz -d -T0 -c "$SITE" | tar x -C /tmp/site
  else python3 -c "import sys, tarfile; tarfile.open(sys.argv[1]).extractall('/tmp/site')" "$SITE"; fi
  el "site unpacked"
fi
export PYTHONPATH=/tmp/site:$DG_DIR/DeepGEMM:$PWD DG_JIT_CACHE_DIR=$DG_DIR/jit
export NVCC_VERSION=$("$CUDA_HOME/bin/nvcc" --version | grep -o "release [0-9.]*, V[0-9.]*") DEEPGEMM_COMMIT=54e2261
if has dg || has fwd || has moe || has host || has sync; then
  ( DG_SRC=$DG_SRC DG_DIR=$DG_DIR bash kernels_bench/production/build_deepgemm.sh > "$R/deepgemm_build.txt" 2>&1 ) &
  BUILD=$!
fi
if has prod; then
  python3 -m kernels_bench.production.run --out "$R/prod" --commit "$COMMIT" \
    --families attention,mhc,gemm_dense --budget-s "${BUDGET_PROD:-200}" 2>&1 | grep -v "ok=True" | tail -15
  el "prod done"; pack
fi
if [ -n "${BUILD:-}" ]; then
  wait $BUILD; tail -2 "$R/deepgemm_build.txt"; el "deepgemm built"
fi
if has dg; then
  printf '%s\n' $(python3 -c "from kernels_bench.production.deepgemm import warm_units; print(' '.join(warm_units()))") |
    xargs -P "${WARM_JOBS:-14}" -I{} timeout 240 python3 -m kernels_bench.production.run --out /tmp/warm --warm {} \
    > "$R/deepgemm_warm.txt" 2>&1
  el "JIT warm rc=$?"; grep -i -m5 "error\|assert" "$R/deepgemm_warm.txt"
  python3 -m kernels_bench.production.run --out "$R/dg" --commit "$COMMIT" --budget-s "${BUDGET_DG:-150}" \
    --families dg_indexer_prefill,dg_indexer_decode,dg_indexer_decode_spec,dg_moe,dg_dense,dg_wo_a,dg_hc_prenorm \
    2>&1 | grep -v "ok=True" | tail -15
  el "dg done"; pack
fi
if has moe; then
  python3 -m kernels_bench.production.moe_grouped --out "$R/moe" --commit "$COMMIT" 2>&1 | tail -14
  el "moe grouped done"; pack
fi
if has fwd; then
  python3 -m kernels_bench.production.forward --out "$R/fwd" --commit "$COMMIT" --budget-s "${BUDGET_FWD:-150}" 2>&1 | tail -12
  el "forward done"; pack
fi
if has host || has sync; then
  printf '%s\n' dg_dense:V4:wq_a dg_moe:V4:moe_gate_up dg_indexer_prefill dg_wo_a dg_hc_prenorm |
    xargs -P 5 -I{} timeout 240 python3 -m kernels_bench.production.run --out /tmp/warm --warm {} \
    > "$R/host_warm.txt" 2>&1
  el "host JIT warm rc=$?"
fi
if has host; then
  python3 -m kernels_bench.production.host_issue --out "$R/host" --commit "$COMMIT" 2>&1 | tail -20
  el "host issue done"; pack
fi
if has sync; then
  python3 -m kernels_bench.production.sync_exposure --out "$R/sync" --commit "$COMMIT" --budget-s "${BUDGET_SYNC:-300}" \
    2>&1 | tail -14
  el "sync exposure done"; pack
fi
if has serve; then
  for spec in deepseek-v4-flash-mini deepseek-v4.1-flash-mini; do
    timeout "${SERVE_TIMEOUT:-200}" python3 -m kernels_bench.serve.bench --out "$R/serve_$spec" --commit "$COMMIT" \
      --budget-s "${BUDGET_SERVE:-140}" --skip-check --spec "$spec" 2>&1 | tail -6
    el "serve bench $spec done"; pack
  done
fi
if has run; then
  timeout "${RUN_TIMEOUT:-280}" python3 -m kernels_bench.serve.run --trace traces/replay_v4_mini.parquet --out "$R/run_v4" \
    --step kernels_bench.serve.model:gpu_step_function --step-arg kv_gib=${KV_GIB:-40} --model deepseek-v4-flash-mini \
    --commit "$COMMIT" 2>&1 | tee -a "$R/run_stdout.txt" | tail -8
  el "run v4 done"; pack
fi
if has run41; then
  timeout "${RUN_TIMEOUT:-280}" python3 -m kernels_bench.serve.run --trace traces/replay_v4_mini.parquet --out "$R/run_v41" \
    --step kernels_bench.serve.model41:gpu_step_function --step-arg kv_gib=${KV_GIB:-40} --model deepseek-v4.1-flash-mini \
    --commit "$COMMIT" 2>&1 | tee -a "$R/run_stdout.txt" | tail -8
  el "run v41 done"; pack
fi
if has ours; then
  python3 -m kernels_bench.run_all --out "$R/ours" --commit "$COMMIT" --budget-s "${BUDGET_OURS:-240}" \
    ${FAMILIES_OURS:+--families $FAMILIES_OURS} 2>&1 | tail -8
  el "ours done"; pack
fi
pack && ls -la "$OUT"
el "total"
