#!/usr/bin/env bash
# One device call: unpack the production packages, run the GPU tests, then the production tables
# (and, with FWD=1, the forward-pass check). Run from the repository root on the device machine:
#   SITE=.whl/site.tar.zst bash kernels_bench/production/device_call.sh
# SITE: a tar.zst of the unpacked wheels (sgl-flash-mla 1.0.0, tile-kernels 2.1.0, tilelang 0.1.15,
# apache-tvm-ffi 0.1.12, torch-c-dlpack-ext 0.1.5, z3-solver 4.15.4); ZSTD_WHEEL: the zstandard wheel, used
# when the machine has no zstd binary. Everything goes to $OUT (the log is tee'd so a timeout keeps it).
set -o pipefail
export PYTHONUNBUFFERED=1 CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT" /tmp/site
t0=$(date +%s)
if [ ! -f /tmp/site/flash_mla/__init__.py ]; then
  if command -v zstd >/dev/null; then zstd -q -d -c "$SITE" | tar x -C /tmp/site
  else
    python3 -m pip install -q --no-index --no-deps --target /tmp/zst "$ZSTD_WHEEL" &&
    PYTHONPATH=/tmp/zst python3 -c "import sys,zstandard,tarfile; tarfile.open(fileobj=zstandard.ZstdDecompressor().stream_reader(open(sys.argv[1],'rb')),mode='r|').extractall('/tmp/site')" "$SITE"
  fi
fi
export PYTHONPATH=/tmp/site:$PWD
echo "unpacked in $(( $(date +%s) - t0 )) s"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
python3 -c "import flash_mla,torch; print('flash_mla', flash_mla.__version__, 'legacy', flash_mla.has_legacy(), 'torch', torch.__version__)"
python3 -c "import tilelang, tile_kernels; print('tilelang', tilelang.__version__)" 2>&1 | tail -2
if [ "${TESTS:-1}" = 1 ]; then
  timeout 240 python3 -m pytest -q -p no:cacheprovider --confcutdir=tests/kernels_bench tests/kernels_bench/test_production.py tests/kernels_bench/test_production_forward.py 2>&1 | tee "$OUT/production_gpu_tests.txt" | tail -15
fi
if [ "${FAMILIES-attention,gemm_dense,mhc}" != "" ]; then
  python3 -m kernels_bench.production.run --out "$OUT" --commit "${COMMIT:-unknown}" \
    --families "${FAMILIES:-attention,gemm_dense,mhc}" --budget-s "${BUDGET:-330}" 2>&1 | grep -v "^\[.*ok=True" | tail -40
fi
if [ "${FWD:-0}" = 1 ]; then
  python3 -m kernels_bench.production.forward --out "$OUT" --commit "${COMMIT:-unknown}" --budget-s "${FWD_BUDGET:-240}" 2>&1 | tail -40
fi
echo "total $(( $(date +%s) - t0 )) s"
