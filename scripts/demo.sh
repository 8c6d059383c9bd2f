#!/usr/bin/env bash
# The main job on the bundled examples: builds anvil, then builds every bundled
# candidate with the cached build service and checks it against its task.
# On a GPU host it runs the CUDA candidates; without a GPU it says so and runs
# the CPU variants. Usage: scripts/demo.sh
source "$(dirname "$0")/lib.sh"
anvil_setup
anvil env || true
if gpu_available; then
  DEVICE=cuda; VARIANTS="cuda cuda_compat"
else
  DEVICE=cpu; VARIANTS="cpu cpu_compat"
  say "no GPU found: running the CPU variants of the examples (the CUDA ones need a GPU)"
fi

printf '\n%-22s %-12s %-7s %-8s %-14s %10s %10s %8s\n' task variant build compiled outcome cand_ms eager_ms speedup
run_one() {  # task-file candidate-dir variant-label
  local task=$1 dir=$2 label=$3 build_json check_json
  build_json=$(anvil build --json "$dir" 2>/dev/null) || true
  local ok secs compiled
  ok=$(echo "$build_json" | "$ANVIL_PYTHON" -c "import json,sys; j=json.load(sys.stdin); print('ok' if j['ok'] else j['error_kind'])" 2>/dev/null || echo error)
  secs=$(echo "$build_json" | "$ANVIL_PYTHON" -c "import json,sys; print('%.2fs' % json.load(sys.stdin)['seconds'])" 2>/dev/null || echo -)
  compiled=$(echo "$build_json" | "$ANVIL_PYTHON" -c "import json,sys; j=json.load(sys.stdin); print('%d/%d' % (j['compiled'], len(j['units'])))" 2>/dev/null || echo -)
  if [ "$ok" != ok ]; then
    printf '%-22s %-12s %-7s %-8s %-14s\n' "$(basename "$task" .py)" "$label" "$secs" "$compiled" "$ok"
    echo "$build_json" | "$ANVIL_PYTHON" -c "import json,sys; print('    ' + json.load(sys.stdin)['diagnostics'].strip().replace(chr(10), chr(10) + '    '))" 2>/dev/null || true
    return
  fi
  check_json=$(timeout 300 "$ANVIL_PYTHON" -m anvil.check --task "$task" --candidate "$dir" --device "$DEVICE" 2>/dev/null) ||
    check_json="{\"outcome\": \"crashed (exit $?)\"}"
  echo "$check_json" | "$ANVIL_PYTHON" -c "
import json, sys
j = json.loads(sys.stdin.read() or '{}')
f = lambda k: ('%.3f' % j[k]) if isinstance(j.get(k), (int, float)) else '-'
print('%-22s %-12s %-7s %-8s %-14s %10s %10s %8s' % ('$(basename "$task" .py)', '$label', '$secs', '$compiled', j.get('outcome', '?'), f('candidate_ms'), f('eager_ms'), f('speedup')))
if j.get('error'): print('    ' + j['error'][:300])
"
}
export PYTHONPATH="$ANVIL_ROOT/python${PYTHONPATH:+:$PYTHONPATH}"
for task in examples/tasks/*.py; do
  name=$(basename "$task" .py)
  for v in $VARIANTS; do
    dir=examples/candidates/$name/$v
    [ -d "$dir" ] && run_one "$task" "$dir" "$v"
  done
done
for b in compile_error wrong_math crash; do
  run_one examples/tasks/01_elementwise_chain.py "examples/broken/$b/${DEVICE}" "broken/$b"
done
say "done. Run it again: every build now comes from the cache."
