#!/usr/bin/env bash
# Runs a suite with a hosted OpenAI-compatible model (OpenAI, OpenRouter, Together, a vLLM behind a
# key, ...) through `anvil bench --agent`: one episode per task, each judged by its final
# evaluation, the model's tokens and their cost in results.json, report.md and report.html
# (docs/bench.md, "A hosted model").
#
# Usage: scripts/bench_hosted.sh ENDPOINT MODEL [TASKS] [OUT] [-- ANVIL BENCH OPTIONS...]
#   ENDPOINT  the server's base URL (e.g. https://api.openai.com/v1), or `local` (the bundled small
#             model, no key; MODEL may then be "")
#   MODEL     the model's name as the server knows it
#   TASKS     the suite (default examples/tasks: the six bundled tasks)
#   OUT       the run directory (default runs/hosted-<MODEL>-<UTC time>); when it already holds a
#             run, that run is continued (--resume: finished tasks kept), so the same command again
#             picks up after an interruption
# The API key is read from the environment, by anvil itself: ANVIL_API_KEY, else OPENAI_API_KEY (or
# the variable named by `--api-key-env NAME` after --). It is never on a command line, never
# printed, and never written to the run directory: the script checks OUT after the run and fails
# (exit 3, naming the files, not the key) if the key is in any of them.
# Prices: ANVIL_PRICE_INPUT and ANVIL_PRICE_OUTPUT, USD per million prompt / completion tokens (both,
# or neither: tokens without a cost). ANVIL_BIN: the anvil program (default build/anvil).
# Exit status: anvil bench's (0 every task settled, 1 some task not evaluated, 2 could not run), 2
# for a usage error here, 3 when the key was found in the run directory.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
say() { printf '\033[1m[bench hosted]\033[0m %s\n' "$*" >&2; }
usage() {
  say "usage: scripts/bench_hosted.sh ENDPOINT MODEL [TASKS] [OUT] [-- ANVIL BENCH OPTIONS...]"
  exit 2
}

positional=()
while [ $# -gt 0 ] && [ "$1" != -- ]; do
  positional+=("$1")
  shift
done
[ "${1:-}" = -- ] && shift
extra=("$@")
if [ ${#positional[@]} -lt 2 ] || [ ${#positional[@]} -gt 4 ]; then usage; fi
endpoint=${positional[0]}
model=${positional[1]}
tasks=${positional[2]:-$root/examples/tasks}
[ -n "$endpoint" ] || usage
if [ -z "$model" ] && [ "$endpoint" != local ]; then
  say "MODEL is empty: give the model's name as $endpoint serves it"
  exit 2
fi
safe_model=$(printf '%s' "${model:-local}" | tr -c 'A-Za-z0-9._-' '_')
out=${positional[3]:-runs/hosted-$safe_model-$(date -u +%Y%m%d-%H%M%S)}
anvil=${ANVIL_BIN:-$root/build/anvil}
if [ ! -x "$anvil" ]; then
  say "no anvil program at $anvil: build it (scripts/demo.sh, or cmake -S . -B build && cmake --build build), or set ANVIL_BIN"
  exit 2
fi

# The key's variable, as anvil will pick it (only its name is ever said).
key_vars=(ANVIL_API_KEY OPENAI_API_KEY)
for ((i = 0; i < ${#extra[@]}; i++)); do
  case ${extra[i]} in
    --api-key-env) key_vars=("${extra[i + 1]:-}") ;;
    --api-key-env=*) key_vars=("${extra[i]#--api-key-env=}") ;;
  esac
done
key_var=""
for v in "${key_vars[@]}"; do
  if [[ $v =~ ^[A-Za-z_][A-Za-z0-9_]*$ ]] && [ -n "${!v:-}" ]; then
    key_var=$v
    break
  fi
done
if [ -z "$key_var" ] && [ "$endpoint" != local ]; then
  say "no API key: set ${key_vars[*]} in the environment (anvil reads it from there; it is never written)"
  exit 2
fi

args=(bench --tasks "$tasks" --agent --endpoint "$endpoint" --out "$out")
[ -n "$model" ] && args+=(--model "$model")
[ -f "$out/bench.json" ] && args+=(--resume)
[ -n "${ANVIL_PRICE_INPUT:-}" ] && args+=(--price-input "$ANVIL_PRICE_INPUT")
[ -n "${ANVIL_PRICE_OUTPUT:-}" ] && args+=(--price-output "$ANVIL_PRICE_OUTPUT")
key_note="no key"
[ -n "$key_var" ] && key_note="the key from \$$key_var"
say "$tasks with ${model:-the local model} at $endpoint ($key_note) -> $out"
status=0
"$anvil" "${args[@]}" "${extra[@]}" || status=$?

# The key must be nowhere in the run directory (settings, records, trajectories, workdirs). The key
# goes to grep through a pipe, not its command line; a key shorter than 8 characters is not one a
# search can tell from ordinary text.
if [ -n "$key_var" ] && [ -d "$out" ]; then
  key=${!key_var}
  if [ ${#key} -ge 8 ]; then
    leaked=$(grep -rlF -f <(printf '%s\n' "$key") -- "$out" || true)
    if [ -n "$leaked" ]; then
      say "the API key (\$$key_var) is in the run directory, in:"
      printf '%s\n' "$leaked" | sed 's/^/  /' >&2
      exit 3
    fi
  fi
fi
if [ -f "$out/report.md" ]; then
  say "reports: $out/report.md, $out/report.html (tokens and cost: docs/bench.md, \"Tokens and cost\")"
fi
exit "$status"
