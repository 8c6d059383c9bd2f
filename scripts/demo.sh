#!/usr/bin/env bash
# The main job on the bundled examples: builds anvil, then judges every bundled
# candidate against its task with `anvil eval` (private copy, cached build,
# isolated runner, verification, timing against eager and torch.compile,
# milestone reward), plus the deliberately broken candidates, then the same
# candidates as one `anvil bench` run with its reports. On a GPU host it
# runs the CUDA candidates; without a GPU it says so and runs the CPU variants.
# Usage: scripts/demo.sh
source "$(dirname "$0")/lib.sh"
anvil_setup
anvil env || true
EXTRA=()
AGENT_EXTRA=()
if gpu_available; then
  DEVICE=cuda; VARIANTS="cuda cuda_compat"
else
  DEVICE=cpu; VARIANTS="cpu cpu_compat"
  EXTRA=(--compile-mode none --calls 10)
  AGENT_EXTRA=(--compile-mode none)
  say "no GPU found: running the CPU variants of the examples (the CUDA ones need a GPU);"
  say "on the CPU no speed is credited, so the reward is at most 1 (docs/anti-hacking.md); the times are shown"
fi

table() {  # reads anvil eval JSON lines (label<TAB>json) and prints one row each
  "$ANVIL_PYTHON" -c '
import json, sys
f = lambda v, s="%.4f": s % v if isinstance(v, (int, float)) else "-"
print("%-22s %-21s %-14s %6s %10s %10s %10s %8s %8s" % ("task", "candidate", "outcome", "reward", "cand_ms",
      "eager_ms", "compile_ms", "x_eager", "x_comp"))
for line in sys.stdin:
    label, _, text = line.rstrip("\n").partition("\t")
    task, cand = label.split(" ")
    try:
        j = json.loads(text)
    except json.JSONDecodeError:
        print("%-22s %-21s could not evaluate" % (task, cand)); continue
    if not j.get("outcome"):
        print("%-22s %-21s could not evaluate: %s" % (task, cand, j.get("error", "")[:80])); continue
    t = j.get("timing") or {}
    print("%-22s %-21s %-14s %6d %10s %10s %10s %8s %8s" % (task, cand, j["outcome"], j["reward"],
          f(t.get("candidate_ms")), f(t.get("eager_ms")), f(t.get("compile_ms")),
          f(t.get("speedup_eager"), "%.2fx"), f(t.get("speedup_compile"), "%.2fx")))
    if j["outcome"] != "ok" and j.get("message"):
        print("    " + "\n    ".join(j["message"].strip().splitlines()[:3]))
'
}

{
  for task in examples/tasks/*.py; do
    name=$(basename "$task" .py)
    for v in $VARIANTS; do
      dir=examples/candidates/$name/$v
      [ -d "$dir" ] || continue
      printf '%s %s\t%s\n' "$name" "$v" "$(anvil eval --json --task "$task" --candidate "$dir" "${EXTRA[@]}" 2>/dev/null | tr -d '\n')"
    done
  done
  for b in compile_error wrong_math crash mutates_input hang; do
    printf '%s %s\t%s\n' 01_elementwise_chain "broken/$b" "$(anvil eval --json --timeout 30 --task examples/tasks/01_elementwise_chain.py \
      --candidate "examples/broken/$b/$DEVICE" "${EXTRA[@]}" 2>/dev/null | tr -d '\n')"
  done
} | table

# The same candidates as one benchmark run: per-task records, the paper's metrics per level, and the
# reports (report.md, and report.html with plots, self-contained). Builds and baselines are cached by now.
say "the examples as one benchmark run (anvil bench)"
# Its records and reports stay in runs/demo/ (ignored by git; the next demo replaces them).
DEMO_OUT=runs/demo
rm -rf "$DEMO_OUT"
mkdir -p "$DEMO_OUT"
BENCH_OUT=$DEMO_OUT/bench
anvil bench --tasks examples/tasks --solutions examples/candidates --out "$BENCH_OUT" --no-progress "${EXTRA[@]}"

# The agent loop end to end: a scripted model (tests/replay_server.py, real HTTP) writes the bundled
# candidate into a fresh workdir through anvil's tools (bash, read/write, compile, verify, profile,
# finish); the final workdir is judged afresh. `anvil agent --endpoint URL --model NAME` drives a real one.
say "one scripted agent episode (anvil agent against the replay server)"
AGENT_OUT=$DEMO_OUT/agent
python3 bench/agent_scripted.py --task examples/tasks/01_elementwise_chain.py \
  --candidate "examples/candidates/01_elementwise_chain/${VARIANTS%% *}" --out "$AGENT_OUT" --anvil "$ANVIL_BIN" \
  --no-ncu -- "${AGENT_EXTRA[@]}" | tail -24
say "done. The benchmark's reports: $BENCH_OUT/report.html and report.md; the agent's run: $AGENT_OUT."
say "Builds and baselines are cached now: a second run is much faster."
