#!/usr/bin/env bash
# issue 24: anvil bench --overlap on two H200s: prefill, GPU tests of the new path, then the runs.
set -u
export ANVIL_PYTHON=$(command -v python3) PYTHONUNBUFFERED=1 ANVIL_BIN=$PWD/.carry/anvil
export ANVIL_CACHE=/tmp/anvil-multi-cache RUNS=/tmp/anvil-multi-runs SUITE=/tmp/anvil-bench-suite
nvidia-smi --query-gpu=index,name,driver_version,persistence_mode --format=csv,noheader; nproc; date -u
case ${PART:-1} in
1)
  ANVIL_TEST_DEVICE=cuda timeout 150 python3 -m pytest python/tests/test_judge.py -q -p no:cacheprovider \
    -k "gpu_is_its_own or prepared_together or wait_for_the_gpu_lock" 2>&1 | grep -E "^E |passed|failed" | head -12
  date -u
  OUT=$OUT timeout 380 bash bench/gpu_multi_check.sh prefill 2>&1 | tail -8
  date -u
  ;;
2)
  OVERLAP=1 OUT=$OUT timeout 250 bash bench/gpu_multi_check.sh alone0-o1 2>&1 | grep "^==" 
  OVERLAP=3 OUT=$OUT timeout 200 bash bench/gpu_multi_check.sh alone0-o3 2>&1 | grep "^=="
  OVERLAP=3 OUT=$OUT timeout 140 bash bench/gpu_multi_check.sh both-o3 2>&1 | grep "^=="
  date -u
  ;;
3)
  OVERLAP=1 OUT=$OUT timeout 200 bash bench/gpu_multi_check.sh both-o1 2>&1 | grep "^=="
  OVERLAP=3 OUT=$OUT timeout 200 bash bench/gpu_multi_check.sh alone1-o3 2>&1 | grep "^=="
  OUT=$OUT bash bench/gpu_multi_check.sh compare-o3 2>&1 | tail -1
  OUT=$OUT bash bench/gpu_multi_check.sh compare-o1 2>&1 | tail -1
  python3 bench/multi_gpu_check.py --single 0=$RUNS/alone0-o1 --multi $RUNS/alone0-o3 --out $OUT/multi-gpu-*/overlap-vs-serial.json | tail -1
  date -u
  (cd $OUT && tar czf all.tgz multi-gpu-* && rm -rf multi-gpu-*)
  (cd $RUNS && tar czf $OUT/runs.tgz */bench.json */results.json */tasks)
  ;;
esac
