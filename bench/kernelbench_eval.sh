#!/usr/bin/env bash
# Cold and warm `anvil eval` of KernelBench problems on the GPU host (issue 17: cold <= 15 s p50,
# warm <= 3 s p50). The candidate of each problem is the problem itself with Model renamed ModelNew
# (torch ops: an honest candidate under the kernelbench protocol, no build), so that the seconds
# are the judge's: vetting, inputs, verification, the candidate's timing and, cold, the eager and
# torch.compile baselines. Cold: a cache that has never seen the task (its own ANVIL_CACHE, the
# warm zygote started first); warm: the same evaluation again. KB: a checkout of KernelBench;
# TASKS: paths under KernelBench/ (default: a sample of levels 1 and 2); PASSES: the passes of each
# (default "cold warm"; "cold warm warm" times the warm evaluation twice). Results go to $OUT.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-bench/results}
KB=${KB:?set KB to a checkout of KernelBench}
CANDS=$(mktemp -d /tmp/anvil-eval-candidates.XXXX)
mkdir -p "$OUT"
if [ -z "${ANVIL_BIN:-}" ] && [ -x .carry/anvil ]; then export ANVIL_BIN=$PWD/.carry/anvil; fi
export ANVIL_BIN=${ANVIL_BIN:-$PWD/build/anvil}
export ANVIL_CACHE=${EVAL_CACHE:-$(mktemp -d /tmp/anvil-eval-cache.XXXX)}
TASKS=${TASKS:-"level1/1_Square_matrix_multiplication_.py level1/19_ReLU.py level1/23_Softmax.py level1/40_LayerNorm.py level1/47_Sum_reduction_over_a_dimension.py level1/63_conv_standard_2D__square_input__square_kernel.py level2/12_Gemm_Multiply_LeakyReLU.py level2/40_Matmul_Scaling_ResidualAdd.py level2/80_Gemm_Max_Subtract_GELU.py"}
t0=$(date +%s.%N)
"$ANVIL_BIN" vet --device cuda examples/vet/healthy.py > /dev/null 2>&1  # starts the zygote
echo "zygote start (first command of a fresh cache): $(python3 -c "import time; print(round(time.time() - $t0, 1))") s"
rows="$OUT/eval-kernelbench.jsonl"
: > "$rows"
for rel in $TASKS; do
  task="$KB/KernelBench/$rel"
  cand="$CANDS/$(basename "$rel")"
  python3 - "$task" "$cand" <<'PY'
import re, sys
src = open(sys.argv[1]).read()
open(sys.argv[2], "w").write(re.sub(r"\bModel\b", "ModelNew", src))
PY
  for pass in ${PASSES:-cold warm}; do
    s=$(date +%s.%N)
    "$ANVIL_BIN" eval --json --protocol kernelbench --task "$task" --candidate "$cand" > "$OUT/eval.one.json" 2> "$OUT/eval.one.err"
    code=$?
    python3 - "$OUT/eval.one.json" "$rel" "$pass" "$code" "$s" >> "$rows" <<'PY'
import json, sys, time
path, rel, pas, code, s = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), float(sys.argv[5])
row = {"task": rel, "pass": pas, "exit": code, "wall_s": round(time.time() - s, 2)}
try:
    j = json.load(open(path))
    t = j.get("timing") or {}
    row.update(outcome=j.get("outcome"), status=j.get("status"), error=str(j.get("error") or "")[:1000],
               reason=j.get("reason"), message=(j.get("message") or "")[:1000],
               vet_error=(j.get("task") or {}).get("vet_error"), vet_flags=[f.get("flag") for f in (j.get("task") or {}).get("flags") or []],
               seconds=j.get("seconds"), judge=((j.get("defenses") or {}).get("seconds") or {}).get("judge"),
               candidate_clock=((j.get("defenses") or {}).get("seconds") or {}).get("candidate"),
               draws=((j.get("defenses") or {}).get("inputs") or {}).get("draws"),
               eager_ms=t.get("eager_ms"), compile_ms=t.get("compile_ms"),
               candidate_ms=t.get("candidate_ms"), eager_cached=(t.get("eager") or {}).get("cached", False),
               compile_cached=(t.get("compile") or {}).get("cached", False))
except Exception as e:  # noqa: BLE001
    row.update(outcome="no_report", message=str(e)[:160])
print(json.dumps(row))
PY
  done
done
python3 - "$rows" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
p = lambda xs, q: xs[min(len(xs) - 1, int(q * len(xs)))] if xs else None
for pas in ("cold", "warm"):
    w = sorted(r["wall_s"] for r in rows if r["pass"] == pas)
    print("%s: %d evaluations, wall p50 %s s, p90 %s s, max %s s" % (pas, len(w), p(w, .5), p(w, .9), w[-1] if w else None))
for r in rows:
    sec = r.get("seconds") or {}
    run = sec.get("runner") or {}
    print("  %-5s %-48s %6.1f s %-8s %s eager %s compile %s cand %s | %s" % (
        r["pass"], r["task"][:48], r["wall_s"], r.get("outcome"), r.get("reason") or "", r.get("eager_ms"),
        r.get("compile_ms"), r.get("candidate_ms"),
        " ".join("%s %s" % (k, v) for k, v in sorted(run.items()) if isinstance(v, (int, float)) and v >= 0.3)))
    judge = r.get("judge") or {}
    if r["pass"] == "warm" and judge:  # where a warm evaluation's time goes: the judge's phases of 0.2 s or more
        print("        judge: " + ", ".join("%s %.2f" % (k, v) for k, v in sorted(judge.items(), key=lambda kv: -kv[1])
                                        if not k.startswith("@") and k != "origin" and isinstance(v, (int, float))
                                        and v >= 0.2))
        mine = r.get("candidate_clock") or {}
        print("        candidate's process: " + ", ".join("%s %.2f" % (k, v) for k, v in sorted(mine.items(), key=lambda kv: -kv[1])
                                                    if not k.startswith("@") and isinstance(v, (int, float)) and v >= 0.1))
PY
rm -f "$OUT/eval.one.json" "$OUT/eval.one.err"
