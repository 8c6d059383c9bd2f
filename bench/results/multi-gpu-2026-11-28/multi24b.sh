#!/usr/bin/env bash
set -u
export ANVIL_BIN=$PWD/.carry/anvil ANVIL_PYTHON=$(command -v python3) ANVIL_CACHE=/tmp/anvil-multi-cache PYTHONUNBUFFERED=1
date -u
timeout 120 python3 bench/driver_ops_probe.py --conditions alone,ctx_loop --reps 20 --out $OUT/driver-ops-2.json > /dev/null
python3 bench/suite/make_suite.py --out /tmp/suite --faults > /dev/null
timeout 400 python3 bench/multi_gpu_contention.py --task /tmp/suite/tasks/level1/41_Multiply_8388x1000.py \
  --candidate /tmp/suite/solutions/level1/41_Multiply_8388x1000/cuda --runs 6 \
  --conditions alone,eval_on_gpu1,mntns_loop,eval_on_gpu1_fresh,alone --out $OUT/contention-2.json > /dev/null
date -u
