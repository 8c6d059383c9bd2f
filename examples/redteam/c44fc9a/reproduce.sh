#!/usr/bin/env bash
# reproduce.sh NAME [anvil eval args...]: run examples/redteam/c44fc9a/NAME with a c44fc9a build of
# anvil ($OLD) on the red team's task, in its own cache; prints the result's outcome line.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
: "${OLD:?set OLD to the anvil binary built at c44fc9a}"
name=$1; shift
export ANVIL_CACHE=/var/tmp/anvil-old-cache ANVIL_PYTHON=${ANVIL_PYTHON:-$root/.venv/bin/python}
mkdir -p /tmp/redteam-old
"$OLD" eval --json --compile-mode none --task "$root/examples/redteam/tasks/small_chain.py" \
  --candidate "$here/$name/model_new.py" "$@" > "/tmp/redteam-old/$name.json" || true
python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); print(j.get("outcome"), j.get("reason"), "reward", j.get("reward"), (j.get("verify") or {}))' "/tmp/redteam-old/$name.json"
