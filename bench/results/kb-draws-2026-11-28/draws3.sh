#!/usr/bin/env bash
# issue 17: the trials drawn by each process, checked by digest: GPU tests, then warm evaluations.
set -u
export ANVIL_PYTHON=$(command -v python3) PYTHONUNBUFFERED=1 ANVIL_BIN=$PWD/.carry/anvil
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; date -u
ANVIL_TEST_DEVICE=cuda timeout 100 python3 -m pytest python/tests/test_judge.py -q -p no:cacheprovider \
  -k "drawn_by_each or state_of_their_own or kernelbench_protocol or holds_no" 2>&1 | grep -E "^E |passed|failed" | head -12
date -u
PASSES="cold warm warm" OUT=$OUT/eval KB=$PWD/.carry/kernelbench timeout 140 bash bench/kernelbench_eval.sh 2>&1 | grep -v "^        " | head -40
date -u
