#!/usr/bin/env bash
# issue 17: baselines prepared together (a wave shares the GPU's lock while it prepares, then each
# times alone) against alone, in one run: L2 every 10th, alone, together, alone, together.
set -u
export PYTHONUNBUFFERED=1 ANVIL_BIN=$PWD/.carry/anvil ANVIL_CACHE=/tmp/anvil-bar ANVIL_REV=${ANVIL_REV:-unknown}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; date -u
for run in alone1 together1 alone2 together2; do
  mode=${run%[0-9]}
  mkdir -p $OUT/$run
  KB=.carry/kernelbench STEPS=baselines LEVELS="${AB_LEVELS:-2}" EVERY=${AB_EVERY:-10} \
    BASELINE_ARGS="--no-baseline-cache --jobs 16 --prepare $mode" OUT=$OUT/$run \
    timeout 200 bash bench/kernelbench_baselines.sh 2>&1 | grep -E "^level|^all|judge's phases" | cut -c1-400
  date -u
done
