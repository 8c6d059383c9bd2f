#!/usr/bin/env bash
# Issue 21's GPU checks in one command (the device tool's 10-minute limit): a scripted agent episode
# whose first turn profiles the reference and which tunes a candidate's launch configuration
# (bench/gpu_agent_check.sh on 01_elementwise_chain's cuda_tuned), `anvil bench` over the bundled
# examples (its report's per-family table: bench/gpu_bench_check.sh examples), `anvil task profile` of
# a GEMM task, and anvil synth's GPU stage on tasks that end their process or hang (each must get its
# verdict: bench/gpu_stage_faults.py). Each step's files are packed into $OUT as soon as it ends
# (issue21-<date>-{agent,bench,stage}.tgz, the profile's text and JSON), the log in
# $OUT/issue21-<date>.log, so a step cut off by the limit loses only itself.
#   .carry/anvil: a stripped build/anvil (strip -o .carry/anvil build/anvil)
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-bench/results}
day=$(date -u +%F)
work=$(mktemp -d)
pre=$OUT/issue21-$day
mkdir -p "$OUT"
export ANVIL_BIN=${ANVIL_BIN:-$PWD/.carry/anvil} ANVIL_PYTHON=${ANVIL_PYTHON:-$(command -v python3)} PYTHONUNBUFFERED=1
export ANVIL_CACHE=${ANVIL_CACHE:-/tmp/anvil-issue21-cache}
status=0
exec > >(tee "$pre.log") 2>&1
echo "anvil $(git describe --always --dirty 2>/dev/null || echo unknown)"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)"; date -u
echo "== agent episode ($SECONDS s)"
AGENT_TASKS=01_elementwise_chain:cuda_tuned OUT=$work/agent timeout 170 bash bench/gpu_agent_check.sh || status=1
tar czf "$pre-agent.tgz" -C "$work/agent" --exclude=run . 2>/dev/null
echo "== bench over the bundled examples ($SECONDS s)"
OUT=$work/bench RUNS=$work/runs timeout 130 bash bench/gpu_bench_check.sh examples || status=1
tar czf "$pre-bench.tgz" -C "$work/bench" . 2>/dev/null
grep -A10 "per kernel family" "$work"/bench/bench-examples-*/report.md | head -16
echo "== anvil task profile ($SECONDS s)"
timeout 60 "$ANVIL_BIN" task profile examples/tasks/04_gemm_bias_relu.py | tee "$pre-profile-04.txt" || status=1
timeout 20 "$ANVIL_BIN" task profile examples/tasks/04_gemm_bias_relu.py --json > "$pre-profile-04.json" || status=1
echo "== synth gpu_stage: tasks that end their process or hang ($SECONDS s)"
PYTHONPATH=python timeout 75 python3 bench/gpu_stage_faults.py "$work/stage" || status=1
tar czf "$pre-stage.tgz" -C "$work/stage" . 2>/dev/null
echo "== done after $SECONDS s, status $status"; date -u
exit $status
