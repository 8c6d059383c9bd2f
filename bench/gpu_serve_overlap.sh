#!/usr/bin/env bash
# Issue 18's bars with `anvil serve --overlap` on one GPU (the device tool's host; one stage per call,
# back to back on one machine: the stages share $ANVIL_CACHE):
#   bash bench/gpu_serve_overlap.sh tests      the GPU tests of the wave's memory and the warm-up
#   bash bench/gpu_serve_overlap.sh evals      64 clients submitting the bundled candidates for
#                                              DURATION s (no kill), then `anvil bench` over the same
#                                              candidates (8 copies of each pair), both --overlap OVERLAP
#   bash bench/gpu_serve_overlap.sh sessions   64 scripted sessions for DURATION s, the server killed
#                                              with SIGKILL at KILL_AT s and restarted
# Results: $OUT/serve-overlap-<date>/ (bench/serve_load.py's JSON and its summary lines).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-bench/results}
export ANVIL_CACHE=${ANVIL_CACHE:-/tmp/anvil-serve-cache}
export PYTHONUNBUFFERED=1
if [ -z "${ANVIL_BIN:-}" ] && [ -x .carry/anvil ]; then export ANVIL_BIN=$PWD/.carry/anvil; fi
export ANVIL_BIN=${ANVIL_BIN:-$PWD/build/anvil}
export ANVIL_PYTHON=${ANVIL_PYTHON:-$(command -v python3)}
OVERLAP=${OVERLAP:-4}
stage=${1:?usage: $0 tests|evals|sessions}
res=$OUT/serve-overlap-$(date -u +%F)
mkdir -p "$res"
exec > >(tee -a "$res/$stage.log") 2>&1
date -u
"$ANVIL_BIN" --version
nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv,noheader
python3 -c "import torch, triton; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'triton', triton.__version__)"
nproc
case $stage in
  tests)
    ANVIL_TEST_DEVICE=cuda timeout 300 python3 -m pytest python/tests/test_judge.py python/tests/test_warm.py -q \
      -p no:cacheprovider -k "short_of_memory or lean_measurement_joins or prepared_together or warm_up" 2>&1 |
      grep -E "^E |^FAILED|passed|failed|error" | head -40
    ;;
  evals)
    timeout 580 python3 bench/serve_load.py --device cuda --clients "${CLIENTS:-64}" --duration "${DURATION:-150}" \
      --overhead-runs "${OVERHEAD_RUNS:-5}" --no-sequential --bench "${COPIES:-8}" --server-args "--overlap $OVERLAP" \
      --out "$res/evals-o$OVERLAP.json" 2> "$res/evals-o$OVERLAP.err" > /dev/null
    echo "exit $?"
    tail -4 "$res/evals-o$OVERLAP.err"
    ;;
  sessions)
    timeout 590 python3 bench/serve_load.py --device cuda --sessions --clients "${CLIENTS:-64}" \
      --duration "${DURATION:-270}" --kill-at "${KILL_AT:-135}" --overhead-runs 0 --no-sequential \
      --server-args "--overlap $OVERLAP" --out "$res/sessions-o$OVERLAP.json" 2> "$res/sessions-o$OVERLAP.err" > /dev/null
    echo "exit $?"
    tail -4 "$res/sessions-o$OVERLAP.err"
    ;;
  *) echo "unknown stage $stage"; exit 2 ;;
esac
date -u
