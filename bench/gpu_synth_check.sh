#!/usr/bin/env bash
# Issue 20's GPU bars, one device-tool command: anvil synth's tasks at full size on the GPU
# (python -m anvil.synth.gpu_stage: eager and torch.compile run, bitwise deterministic, eager runtime
# measured within 1-100 ms) for the first N tasks, and `anvil vet` on a seeded sample of 200.
# Usage: bench/gpu_synth_check.sh TASKS.jsonl [N [VET_SAMPLE [PROCS]]]   (results under $OUT, or ./gpu-synth-out)
set -u
TASKS=${1:?usage: bench/gpu_synth_check.sh TASKS.jsonl [N]}
N=${2:-500}
VET=${3:-200}
PROCS=${4:-$(( $(nproc) - 2 ))}
OUT=${OUT:-gpu-synth-out}
mkdir -p "$OUT"
{
  echo "date: $(date -u +%FT%TZ)"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | sed 's/^/gpu: /'
  python3 -c 'import torch; print("torch:", torch.__version__, "cuda:", torch.version.cuda)'
  echo "cores: $(nproc)"
} | tee "$OUT/machine.txt"
PYTHONPATH=python timeout 590 python3 -m anvil.synth.gpu_stage "$TASKS" --out "$OUT" --limit "$N" --vet-sample "$VET" \
  --procs "$PROCS" --budget-s 470 2>"$OUT/stderr.txt" | tee "$OUT/summary-line.txt"
echo "rc=$?"
tail -3 "$OUT/stderr.txt"
