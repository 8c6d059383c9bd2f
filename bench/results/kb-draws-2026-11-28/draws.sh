#!/usr/bin/env bash
# issue 17: warm evaluations with the trials drawn on the device (new) against the host split (old, HEAD's python/anvil).
set -u
export ANVIL_PYTHON=$(command -v python3) PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader; nproc; date -u
KB=$PWD/.carry/kernelbench
rm -rf /tmp/old && mkdir /tmp/old && cp -a . /tmp/old/ && rm -rf /tmp/old/python/anvil && cp -a .carry/py-old/python/anvil /tmp/old/python/anvil
export PASSES="cold warm warm"
echo "== old"; (cd /tmp/old && OUT=$OUT/old KB=$KB ANVIL_BIN=/tmp/old/.carry/anvil timeout 280 bash bench/kernelbench_eval.sh 2>&1 | grep -v "^        ")
echo "== new"; OUT=$OUT/new KB=$KB timeout 280 bash bench/kernelbench_eval.sh 2>&1 | grep -v "^        "
date -u
echo "== GPU tests"
export ANVIL_BIN=$PWD/.carry/anvil
ANVIL_TEST_DEVICE=cuda timeout 150 python3 -m pytest python/tests/test_judge.py -q -p no:cacheprovider -x -k "drawn_on_the_device or lean or one_trial or allowed_ops or kept" 2>&1 | tail -5
date -u
