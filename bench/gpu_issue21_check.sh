#!/usr/bin/env bash
# Issue 21's GPU checks in one command (the device tool's 10-minute limit): a scripted agent episode
# whose first turn profiles the reference and which tunes a candidate's launch configuration
# (bench/gpu_agent_check.sh on 01_elementwise_chain's cuda_tuned), `anvil bench` over the bundled
# examples (its report's per-family table: bench/gpu_bench_check.sh examples), `anvil task profile` of
# a GEMM task, and anvil synth's GPU stage on a task that ends its process and one that hangs (each
# must get its verdict). Everything lands in $OUT/issue21-<date>.tgz and $OUT/issue21-<date>.log.
#   .carry/anvil: a stripped build/anvil (strip -o .carry/anvil build/anvil)
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-bench/results}
day=$(date -u +%F)
work=$(mktemp -d)
log=$OUT/issue21-$day.log
mkdir -p "$OUT"
export ANVIL_BIN=${ANVIL_BIN:-$PWD/.carry/anvil} ANVIL_PYTHON=${ANVIL_PYTHON:-$(command -v python3)} PYTHONUNBUFFERED=1
export ANVIL_CACHE=${ANVIL_CACHE:-/tmp/anvil-issue21-cache}
status=0
exec > >(tee "$log") 2>&1
echo "anvil $(git describe --always --dirty 2>/dev/null || echo unknown)"; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)"; date -u
echo "== agent episode ($((SECONDS)) s)"
AGENT_TASKS=01_elementwise_chain:cuda_tuned OUT=$work timeout 240 bash bench/gpu_agent_check.sh || status=1
echo "== bench over the bundled examples ($((SECONDS)) s)"
OUT=$work RUNS=$work/runs timeout 180 bash bench/gpu_bench_check.sh examples || status=1
grep -A12 -i "family" "$work"/bench-examples-*/report.md | head -30
echo "== anvil task profile ($((SECONDS)) s)"
timeout 90 "$ANVIL_BIN" task profile examples/tasks/04_gemm_bias_relu.py || status=1
timeout 30 "$ANVIL_BIN" task profile examples/tasks/04_gemm_bias_relu.py --json > "$work/task-profile-04.json" || status=1
echo "== synth gpu_stage: a task that exits, one that hangs ($((SECONDS)) s)"
PYTHONPATH=python timeout 120 python3 bench/gpu_stage_faults.py "$work/gpu-stage" || status=1
echo "== done after $SECONDS s, status $status"; date -u
tar czf "$OUT/issue21-$day.tgz" -C "$work" . 2>/dev/null
exit $status
