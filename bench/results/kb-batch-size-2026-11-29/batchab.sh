#!/usr/bin/env bash
# issue 17: a candidate's batch capped by eager's clock, not by one stalled reference call. A/B in one
# run on one GPU: the bench suite's level 2 (make_suite.py, seed 0) with `--overlap 4`, the judge
# before the change (.carry/judge-old.py) and after it, in turn: old, new, old, new.
set -u
export ANVIL_PYTHON=$(command -v python3) PYTHONUNBUFFERED=1 ANVIL_BIN=$PWD/.carry/anvil ANVIL_CACHE=/tmp/anvil-ab-cache
S=/tmp/anvil-ab-suite SUB=/tmp/anvil-ab-sub RUNS=/tmp/anvil-ab-runs
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nproc; date -u
python3 -c "import torch, triton; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'triton', triton.__version__)"
[ -d $S/tasks ] || python3 bench/suite/make_suite.py --out $S > /dev/null
mkdir -p $SUB/tasks $SUB/solutions && cp -rn $S/tasks/level2 $SUB/tasks/ && cp -rn $S/solutions/level2 $SUB/solutions/
t0=$SECONDS
$ANVIL_BIN baselines $SUB/tasks --overlap 4 --json > $OUT/baselines.json 2> $OUT/baselines.err; echo "baselines exit $? after $((SECONDS - t0)) s"
find $SUB/solutions -mindepth 2 -maxdepth 2 -type d -name cuda -print0 | xargs -0 -P 16 -n 1 $ANVIL_BIN build > /dev/null 2>&1
$ANVIL_BIN vet $SUB/tasks --jobs 8 > $OUT/vet.txt 2>&1; echo "vet: $(tail -1 $OUT/vet.txt); builds and vet after $((SECONDS - t0)) s"
cp python/anvil/judge.py /tmp/judge-new.py
for run in ${RUNS_LIST:-old1 new1 old2 new2}; do
  case $run in old*) cp .carry/judge-old.py python/anvil/judge.py ;; new*) cp /tmp/judge-new.py python/anvil/judge.py ;; esac
  t0=$SECONDS
  $ANVIL_BIN bench --tasks $SUB/tasks --solutions $SUB/solutions --out $RUNS/$run --overlap 4 > $OUT/$run.log 2>&1
  echo "$run: exit $? after $((SECONDS - t0)) s"
done
cp /tmp/judge-new.py python/anvil/judge.py
python3 - $RUNS ${RUNS_LIST:-old1 new1 old2 new2} <<'PY' | tee $OUT/summary.txt
import glob, json, math, os, sys
runs = sys.argv[2:]
for run in runs:
    rows = []
    for f in sorted(glob.glob(os.path.join(sys.argv[1], run, "tasks", "*", "*.json"))):
        t = json.load(open(f))
        tm = (t.get("eval") or {}).get("timing") or {}
        b = (tm.get("candidate") or {}).get("batch") or {}
        bd = tm.get("bound") or {}
        if not b or not bd.get("claimed_ms"):
            continue
        want = min(256, math.ceil(10.0 / bd["claimed_ms"]))
        rows.append((os.path.basename(f)[:-5], b["calls"], want, b["per_call_ms"] / bd["claimed_ms"],
                     bd.get("limited_by"), t.get("reward")))
    short = [r for r in rows if r[1] < 0.9 * r[2]]
    print("%s: %d candidates batched; %d batches under 0.9 of their claim's size; limited by the judge's batch: %d; "
          "rewards %s" % (run, len(rows), len(short), sum(r[4] != "the claim" for r in rows),
                          {k: sum(r[5] == k for r in rows) for k in sorted({r[5] for r in rows}, key=str)}))
    for r in short:
        print("   %-45s calls %3d (claim's size %3d), batch/claim %.2f, %s, reward %s" % r)
PY
(cd $RUNS && tar czf $OUT/runs.tgz */bench.json */results.json */tasks)
date -u
