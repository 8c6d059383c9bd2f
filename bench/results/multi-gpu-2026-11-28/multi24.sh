#!/usr/bin/env bash
# issue 24, call 1: which driver calls wait on the other GPU; an evaluation's phases beside GPU 1's work.
set -u
export ANVIL_BIN=$PWD/.carry/anvil ANVIL_PYTHON=$(command -v python3) ANVIL_CACHE=/tmp/anvil-multi-cache PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=index,name,driver_version,memory.total,persistence_mode --format=csv,noheader
nproc; date -u
timeout 200 python3 bench/driver_ops_probe.py --out $OUT/driver-ops.json > /dev/null
python3 bench/suite/make_suite.py --out /tmp/suite --faults > /dev/null
timeout 300 python3 bench/multi_gpu_contention.py --task /tmp/suite/tasks/level1/41_Multiply_8388x1000.py \
  --candidate /tmp/suite/solutions/level1/41_Multiply_8388x1000/cuda --runs 6 \
  --conditions alone,eval_on_gpu1,ctx_loop,alone --out $OUT/contention.json > /dev/null
date -u
