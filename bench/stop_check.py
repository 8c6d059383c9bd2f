#!/usr/bin/env python3
"""Stopping is clean (issue 16, rule 7), on the GPU host: `anvil eval` of a task with large inputs
is told to stop mid-evaluation, and every process it started must be gone and the GPU's memory free
again within 2 s; the next evaluation of the same task must succeed.

    python3 bench/stop_check.py [--gb 2] [--after 5] [--stops SIGTERM,SIGINT,timeout] [--runners zygote,fresh]
                                [--out FILE.json]

For each way of stopping (SIGTERM, SIGINT, and anvil's own timeout) and each runner (the warm
zygote, a fresh process): start `anvil eval` of bench/stop's candidate on a copy of bench/stop/task.py
with --gb GiB of input, send the signal after --after seconds (or pass --timeout), then poll
nvidia-smi every 20 ms until the GPU's used memory is back to where it was before (within 512 MiB),
and look for processes of the evaluation left behind. Then evaluate again and require an
evaluated outcome. Prints a table; exit 1 if any stop left memory or processes behind for more than
2 s or the next evaluation failed.
"""
import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

HERE = os.path.join(common.ROOT, "bench", "stop")
LIMIT_S = 2.0


def used_mib():
    r = common.sh(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"])
    return int(r.stdout.split()[0])


def evaluation_processes(marker):
    """Processes whose command line or working directory names this evaluation's files."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            with open("/proc/%s/cmdline" % pid, "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
            cwd = os.readlink("/proc/%s/cwd" % pid)
        except OSError:
            continue
        if marker in cmd or marker in cwd or "anvil.runner" in cmd or ("-I -c" in cmd and "runner.entry" in cmd):
            found.append((int(pid), cmd[:120]))
    return found


def evaluate(anvil, task, extra, timeout=900):
    r = subprocess.run([anvil, "eval", "--json", "--task", task, "--candidate", os.path.join(HERE, "candidate")] + extra,
                       capture_output=True, text=True, timeout=timeout)
    try:
        return json.loads(r.stdout)
    except json.JSONDecodeError:
        return {"outcome": None, "error": (r.stderr or r.stdout)[-500:]}


def stop_once(anvil, task, how, zygote, after, baseline):
    extra = ["--zygote", "auto" if zygote else "none"]
    if how == "timeout":
        extra += ["--timeout", str(int(after))]
    proc = subprocess.Popen([anvil, "eval", "--json", "--task", task, "--candidate", os.path.join(HERE, "candidate")]
                            + extra, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    peak = 0
    start = time.perf_counter()
    # At least `after` seconds, and until the evaluation holds GPU memory (inputs on the device), up to 120 s.
    while proc.poll() is None and time.perf_counter() - start < 120 and (
            time.perf_counter() - start < after or peak < baseline + 1024):
        peak = max(peak, used_mib())
        time.sleep(0.1)
    if how != "timeout":
        proc.send_signal(signal.SIGTERM if how == "SIGTERM" else signal.SIGINT)
    stopped = time.perf_counter()
    out, _err = proc.communicate(timeout=600)
    exited = time.perf_counter() - stopped
    free_after = None
    while time.perf_counter() - stopped < 30:
        if used_mib() <= baseline + 512:
            free_after = time.perf_counter() - stopped
            break
        time.sleep(0.02)
    left = evaluation_processes("/eval-")
    outcome = None
    if how == "timeout":
        try:
            outcome = json.loads(out).get("outcome")
        except json.JSONDecodeError:
            outcome = "no JSON"
    return {"stop": how, "runner": "zygote" if zygote else "fresh", "peak_mib": peak, "baseline_mib": baseline,
            "anvil_exited_s": round(exited, 3), "memory_free_s": None if free_after is None else round(free_after, 3),
            "left": left, "outcome": outcome,
            "ok": free_after is not None and free_after <= LIMIT_S and not left and (how != "timeout" or outcome == "timeout")}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gb", type=float, default=2.0)
    ap.add_argument("--after", type=float, default=5.0)
    ap.add_argument("--stops", default="SIGTERM,SIGINT,timeout", help="ways of stopping to try (comma-separated)")
    ap.add_argument("--runners", default="zygote,fresh", help="runners to try (comma-separated)")
    ap.add_argument("--anvil", default=os.environ.get("ANVIL_BIN") or os.path.join(common.ROOT, "build", "anvil"))
    ap.add_argument("--out")
    a = ap.parse_args()
    work = tempfile.mkdtemp(prefix="anvil-stop-")
    task = os.path.join(work, "big_affine.py")
    with open(os.path.join(HERE, "task.py")) as f:
        text = re.sub(r"^N = .*$", "N = int(%r * (1 << 30)) // 4" % a.gb, f.read(), flags=re.M)
    with open(task, "w") as f:
        f.write(text)
    print("warm-up evaluation (builds, baselines, zygote)", flush=True)
    warm = evaluate(a.anvil, task, [])
    print("  ", warm.get("outcome"), warm.get("reward"), (warm.get("message") or warm.get("error") or "")[:200],
          json.dumps(warm.get("seconds")), flush=True)
    rows = []
    stops = [s for s in ("SIGTERM", "SIGINT", "timeout") if s in a.stops.split(",")]
    for zygote in [r == "zygote" for r in ("zygote", "fresh") if r in a.runners.split(",")]:
        for how in stops:
            time.sleep(1.0)
            baseline = used_mib()
            row = stop_once(a.anvil, task, how, zygote, a.after, baseline)
            after = evaluate(a.anvil, task, ["--zygote", "auto" if zygote else "none"])
            row["next"] = after.get("outcome")
            row["ok"] = row["ok"] and after.get("outcome") == "ok"
            rows.append(row)
            print("  %-8s %-7s peak %6d MiB, anvil gone in %.2f s, GPU memory back in %s s, left %d, next: %s -> %s" % (
                how, row["runner"], row["peak_mib"], row["anvil_exited_s"], row["memory_free_s"], len(row["left"]),
                row["next"], "ok" if row["ok"] else "FAILED"), flush=True)
    result = {"fingerprint": common.fingerprint(), "gb": a.gb, "after_s": a.after, "warm": {
        k: warm.get(k) for k in ("outcome", "reward", "message", "seconds")}, "rows": rows,
        "ok": all(r["ok"] for r in rows)}
    if a.out:
        with open(a.out, "w") as f:
            json.dump(result, f, indent=2)
    print("stops clean: %d of %d" % (sum(r["ok"] for r in rows), len(rows)))
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
