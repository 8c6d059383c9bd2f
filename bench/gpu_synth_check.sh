#!/usr/bin/env bash
# Issue 20's GPU bars, each stage one device-tool command (results under $OUT, or ./gpu-synth-out):
#   bench/gpu_synth_check.sh check TASKS.jsonl [N [PROCS]]
#       the GPU stage (python -m anvil.synth.gpu_stage) over the first N tasks (default 600) within
#       the 10-minute command: $OUT/gpu.jsonl, $OUT/gpu-summary.json
#   bench/gpu_synth_check.sh audit TASKS.jsonl JOURNAL [SAMPLE [PROCS]]
#       a seeded sample (default 200) of the tasks a check's JOURNAL (its gpu.jsonl) accepted,
#       audited in new processes: `anvil vet` at full size on the GPU, and determinism again
#   bench/gpu_synth_check.sh synth COUNT
#       `anvil synth --count COUNT --gpu` end to end on the host (the CPU stage on its cores, the GPU
#       stage on its GPU); needs .carry/anvil (a stripped build/anvil) and, where the host has no
#       pyarrow, .whl/pyarrow-*.whl or .whl/pyarrow312.tar.xz (its contents, slimmed)
# TASKS.jsonl: rows with index, ops, code, estimate_ms (a GPU host may have no pyarrow to read Parquet).
set -u
cd "$(dirname "$0")/.."
stage=${1:?usage: bench/gpu_synth_check.sh check|audit|synth ...}
shift
OUT=${OUT:-gpu-synth-out}
mkdir -p "$OUT"
{
  echo "date: $(date -u +%FT%TZ)"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | sed 's/^/gpu: /'
  python3 -c 'import sys, torch; print("torch:", torch.__version__, "cuda:", torch.version.cuda, "python:", sys.version.split()[0])'
  echo "cores: $(nproc)"
  echo "commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
} | tee "$OUT/machine-$stage.txt"
export PYTHONPATH=$PWD/python${PYTHONPATH:+:$PYTHONPATH}
case $stage in
  check)
    TASKS=$1 N=${2:-600} PROCS=${3:-12}
    timeout 590 python3 -m anvil.synth.gpu_stage "$TASKS" --out "$OUT" --limit "$N" --procs "$PROCS" --budget-s 500 \
      2>"$OUT/stderr-check.txt" | tee "$OUT/summary-check.txt"
    echo "rc=${PIPESTATUS[0]}"
    ;;
  audit)
    TASKS=$1 JOURNAL=$2 SAMPLE=${3:-200} PROCS=${4:-8}
    work=/tmp/gpu-synth-audit
    rm -rf "$work" && mkdir -p "$work" && cp "$JOURNAL" "$work/gpu.jsonl"
    # only the tasks the journal has verdicts for: nothing is checked again, the sample is audited
    python3 - "$TASKS" "$work/gpu.jsonl" "$work/rows.jsonl" <<'PY'
import json, sys
done = {json.loads(l)["index"] for l in open(sys.argv[2]) if l.strip()}
with open(sys.argv[3], "w") as f:
    for line in open(sys.argv[1]):
        if line.strip() and json.loads(line)["index"] in done:
            f.write(line)
PY
    timeout 590 python3 -m anvil.synth.gpu_stage "$work/rows.jsonl" --out "$work" --vet-sample "$SAMPLE" --procs "$PROCS" \
      2>"$OUT/stderr-audit.txt" | tee "$OUT/summary-audit.txt"
    echo "rc=${PIPESTATUS[0]}"
    cp "$work/gpu-summary.json" "$OUT/audit-summary.json"
    ;;
  synth)
    COUNT=${1:-100}
    ANVIL=${ANVIL_BIN:-$PWD/.carry/anvil}
    [ -x "$ANVIL" ] || ANVIL=$PWD/build/anvil
    if ! python3 -c 'import pyarrow' 2>/dev/null; then
      mkdir -p /tmp/pyarrow-site
      whl=$(ls .whl/pyarrow-*.whl 2>/dev/null | head -1)
      [ -n "$whl" ] && python3 -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall("/tmp/pyarrow-site")' "$whl"
      # or a slimmed copy (the wheel without flight and substrait), to fit the device tool's 64 MiB
      [ -f .whl/pyarrow312.tar.xz ] && tar xJf .whl/pyarrow312.tar.xz -C /tmp/pyarrow-site
      export PYTHONPATH=$PYTHONPATH:/tmp/pyarrow-site
    fi
    rm -rf /tmp/gpu-synth-run
    timeout 590 "$ANVIL" synth --count "$COUNT" --out /tmp/gpu-synth-run/tasks.parquet --gpu --no-progress \
      >"$OUT/synth-stdout.txt" 2>"$OUT/synth-stderr.txt"
    echo "rc=$?"
    cat "$OUT/synth-stdout.txt"
    tail -5 "$OUT/synth-stderr.txt"
    cp /tmp/gpu-synth-run/tasks.summary.json "$OUT/synth-summary.json" 2>/dev/null
    cp /tmp/gpu-synth-run/tasks.gpu/gpu.jsonl "$OUT/synth-gpu.jsonl" 2>/dev/null
    python3 -c 'import sys, pyarrow.parquet as pq; t = pq.read_table(sys.argv[1]); print("parquet rows", t.num_rows, "gpu_eager_ms nulls", t.column("gpu_eager_ms").null_count)' /tmp/gpu-synth-run/tasks.parquet
    ;;
  *)
    echo "unknown stage $stage" >&2
    exit 2
    ;;
esac
