#!/usr/bin/env bash
# The agent on the GPU host in one command: scripted episodes (tests/replay_server.py plays the model
# over real HTTP) whose first turn profiles the reference (profile_reference), then write bundled
# CUDA candidates into the workdir, compile, verify, profile, tune (a candidate whose ModelNew sets
# self.config), ncu_profile of the reference and of ModelNew, and finish through `anvil agent`; each
# final workdir is judged afresh and must earn a reward of at least 1, and the first turn must have
# shown the reference's profile. AGENT_TASKS: TASK:VARIANT pairs (default below). Results
# (trajectories, summaries, this log) go to $OUT.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-bench/results}
mkdir -p "$OUT"
day=$(date -u +%F)
export PYTHONUNBUFFERED=1
if [ -z "${ANVIL_BIN:-}" ] && [ -x .carry/anvil ]; then export ANVIL_BIN=$PWD/.carry/anvil; fi
export ANVIL_BIN=${ANVIL_BIN:-$PWD/build/anvil}
export ANVIL_PYTHON=${ANVIL_PYTHON:-$(command -v python3)}
echo "anvil ${ANVIL_REV:-$(git describe --always --dirty 2>/dev/null || echo unknown)}"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)"
date -u
status=0
for c in ${AGENT_TASKS:-01_elementwise_chain:cuda_tuned 02_softmax:cuda_compat}; do
  task=${c%%:*}; variant=${c##*:}
  echo "== $task ($variant)"
  python3 bench/agent_scripted.py --task "examples/tasks/$task.py" --candidate "examples/candidates/$task/$variant" \
    --out "$OUT/agent-gpu-$day/$task" || status=1
  python3 -c "import json, sys; s = json.load(open(sys.argv[1])); sys.exit(0 if s['first_turn_saw_reference_profile'] else 1)" \
    "$OUT/agent-gpu-$day/$task/summary.json" || { echo "the first turn did not show the reference's profile"; status=1; }
done
exit $status
