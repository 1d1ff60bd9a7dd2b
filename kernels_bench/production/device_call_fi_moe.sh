#!/usr/bin/env bash
# One device call for FlashInfer's SM90 W4A16 MoE table (kernels_bench.production.fi_w4a16_moe;
# docs/engines_and_validation.md section 59), on whichever Hopper GPU the call lands on. From the repo root:
#   COMMIT=<sha> bash kernels_bench/production/device_call_fi_moe.sh
# FI_SITE: a .tar.xz of FlashInfer 0.7.4's Python package with its SM90 cutlass MoE module prebuilt where FlashInfer
# looks for an AOT build (flashinfer/data/aot/fused_moe_90/fused_moe_90.so), and the pure-Python packages it imports
# beyond torch's (apache-tvm-ffi for CPython 3.12, requests, tqdm, nvidia-ml-py, ...): built on the VM, carried in
# the ignored .whl/ folder, never committed. FLASHINFER_DISABLE_JIT keeps FlashInfer from compiling anything here.
set -o pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT" /tmp/fi_site
t0=$(date +%s)
python3 -c "import sys, tarfile; tarfile.open(sys.argv[1]).extractall('/tmp/fi_site')" "${FI_SITE:-.whl/fi_sm90_site.tar.xz}"
echo "unpacked in $(( $(date +%s) - t0 )) s"
export PYTHONPATH=/tmp/fi_site:$PWD FLASHINFER_DISABLE_JIT=1
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem,power.limit --format=csv,noheader | tee "$OUT/gpu.txt"
python3 -c "import flashinfer, torch; print('flashinfer', flashinfer.__version__, 'torch', torch.__version__)" 2>&1 | tail -3
timeout 150 python3 -m pytest -q -p no:cacheprovider --confcutdir=tests/kernels_bench -k kernel_matches tests/kernels_bench/test_fi_w4a16_moe.py 2>&1 | tee "$OUT/fi_gpu_tests.txt" | tail -4
python3 -m kernels_bench.production.fi_w4a16_moe --out "$OUT" --commit "${COMMIT:-unknown}" --budget-s "${BUDGET:-330}" \
  2>&1 | tee "$OUT/fi.log" | tail -6
echo "total $(( $(date +%s) - t0 )) s"
