#!/usr/bin/env bash
# issue 24: the GPU tests of the lock's path again (fixed), then anvil bench --overlap 2 and 4 on GPU 0.
set -u
export ANVIL_PYTHON=$(command -v python3) PYTHONUNBUFFERED=1 ANVIL_BIN=$PWD/.carry/anvil
export ANVIL_CACHE=/tmp/anvil-multi-cache RUNS=/tmp/anvil-multi-runs SUITE=/tmp/anvil-bench-suite
nvidia-smi --query-gpu=index,name,driver_version,persistence_mode --format=csv,noheader; nproc; date -u
ANVIL_TEST_DEVICE=cuda timeout 150 python3 -m pytest python/tests/test_judge.py -q -p no:cacheprovider \
  -k "gpu_is_its_own or prepared_together or wait_for_the_gpu_lock" 2>&1 | grep -E "^E |passed|failed" | head -12
date -u
OUT=$OUT timeout 200 bash bench/gpu_multi_check.sh prefill 2>&1 | grep "^=="
OVERLAP=2 OUT=$OUT timeout 150 bash bench/gpu_multi_check.sh alone0-o2 2>&1 | grep "^=="
OVERLAP=4 OUT=$OUT timeout 140 bash bench/gpu_multi_check.sh alone0-o4 2>&1 | grep "^=="
date -u
(cd $OUT && tar czf all.tgz multi-gpu-* && rm -rf multi-gpu-*)
(cd $RUNS && tar czf $OUT/runs.tgz */bench.json */results.json */tasks)
