#!/usr/bin/env bash
set -u
export ANVIL_BIN=$PWD/.carry/anvil ANVIL_PYTHON=$(command -v python3) ANVIL_CACHE=/tmp/anvil-multi-cache PYTHONUNBUFFERED=1
date -u
python3 -c "import torch; print('torch threads', torch.get_num_threads())"
python3 bench/suite/make_suite.py --out /tmp/suite --faults > /dev/null
for th in default 4; do
  if [ $th = default ]; then unset OMP_NUM_THREADS; else export OMP_NUM_THREADS=$th; fi
  echo "== OMP_NUM_THREADS=$th"
  timeout 270 python3 bench/multi_gpu_contention.py --task /tmp/suite/tasks/level1/41_Multiply_8388x1000.py \
    --candidate /tmp/suite/solutions/level1/41_Multiply_8388x1000/cuda --runs 7 \
    --conditions alone,eval_on_gpu1,alone,eval_on_gpu1 --out $OUT/contention-threads-$th.json > /dev/null
done
date -u
