#!/usr/bin/env bash
set -u
export ANVIL_PYTHON=$(command -v python3) PYTHONUNBUFFERED=1
date -u
rm -rf /tmp/old && mkdir /tmp/old && cp -a . /tmp/old/ && rm -rf /tmp/old/python/anvil && cp -a .carry/py-old/python/anvil /tmp/old/python/anvil
echo "== GPU test, new"
ANVIL_BIN=$PWD/.carry/anvil ANVIL_TEST_DEVICE=cuda timeout 100 python3 -m pytest python/tests/test_judge.py -q -p no:cacheprovider -x -k "allowed_ops_pass_and_are_timed" 2>&1 | grep -E "^E |passed|failed" | head -20
echo "== GPU test, old"
(cd /tmp/old && ANVIL_BIN=/tmp/old/.carry/anvil ANVIL_TEST_DEVICE=cuda timeout 100 python3 -m pytest python/tests/test_judge.py -q -p no:cacheprovider -x -k "allowed_ops_pass_and_are_timed" 2>&1 | grep -E "^E |passed|failed" | head -20)
KB=$PWD/.carry/kernelbench
export PASSES="cold warm warm"
echo "== new (second)"; OUT=$OUT/new2 KB=$KB timeout 200 bash bench/kernelbench_eval.sh 2>&1 | grep -E "^cold|^warm|zygote"
echo "== old (second)"; (cd /tmp/old && OUT=$OUT/old2 KB=$KB ANVIL_BIN=/tmp/old/.carry/anvil timeout 200 bash bench/kernelbench_eval.sh 2>&1 | grep -E "^cold|^warm|zygote")
date -u
