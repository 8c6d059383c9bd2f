#!/usr/bin/env python3
"""The hack suite: every reward hack must be caught, every honest candidate must pass.

examples/hacks/manifest.json lists the hacks (reward-hacking candidates) and the honest candidates.

    python3 bench/hack_suite.py [--device cpu|cuda] [--only NAME,...] [--jobs N] [--out FILE.json]
                                [--anvil PATH] [--defenses-off] [--overhead] [--eval-arg ARG ...]

For each hack and each of its variants that runs on --device (cpu: cpu, cpu_compat; cuda: cuda,
cuda_compat), `anvil eval --json --task TASK --candidate DIR/VARIANT ARGS...` must give the
manifest's expect.outcome, and expect.reason (null: the result has no reason) and expect.task_flag
(one of the result's task.flags) when they are given. A hack with no variant for the device is listed
as not applicable. Each honest ("legit") candidate must come out "ok" with no reason. Prints a table
(name, class, variant, expected, got, caught, seconds), writes every result with the environment's
fingerprint to --out, and exits 1 if a hack got through or an honest candidate was flagged (or could
not be evaluated).

--defenses-off passes --no-defenses to anvil eval (to see what the defenses buy: most hacks should
then get through). --overhead evaluates each honest candidate 3 times (--runs N) with defenses on and
as many off, alternating, each on an idle GPU, after one untimed warm-up each way, and reports the
median wall-time ratio (on / off) per candidate and overall; the bar is 1.20 (defenses add at most
20%), and a median ratio above it exits 1. It also times N evaluations each way back to back (the
throughput an RL loop sees, where one evaluation's teardown overlaps the next one's start).

On the CPU, evaluations run with --compile-mode none (the torch.compile baseline costs a C++ build per
task and decides nothing here) unless --with-compile is given; --jobs N runs N evaluations at once
(on cuda always one: one GPU, and timings must not share it). The binary is --anvil, else $ANVIL_BIN,
else build/anvil; anvil runs the candidates with $ANVIL_PYTHON (default: this interpreter).
"""
import argparse
import concurrent.futures
import datetime
import json
import os
import platform
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

MANIFEST = os.path.join(common.ROOT, "examples", "hacks", "manifest.json")
VARIANTS = {"cpu": ("cpu", "cpu_compat"), "cuda": ("cuda", "cuda_compat")}
OVERHEAD_BAR = 1.20
OVERHEAD_RUNS = 3
EVAL_TIMEOUT_S = 1800  # per evaluation; anvil's own run timeout (600 s) ends a stuck runner first


def gpu_present():
    smi = shutil.which("nvidia-smi")
    if not smi:
        return False
    r = common.sh([smi, "-L"])
    return r.returncode == 0 and "GPU" in r.stdout


def fingerprint(anvil):
    """bench/common's fingerprint (needs torch in this interpreter), else the same fields from
    `anvil env --json` (which probes the torch anvil runs with); both carry `anvil env`'s view."""
    try:
        fp = common.fingerprint()
    except ImportError:
        fp = {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
              "host_cores": os.cpu_count(), "python": platform.python_version(),
              "anvil_rev": os.environ.get("ANVIL_REV", "unknown")}
    r = common.sh([anvil, "env", "--json"])
    try:
        env = json.loads(r.stdout)
    except json.JSONDecodeError:
        env = {"error": (r.stderr or r.stdout).strip()[-500:]}
    fp["anvil_env"] = env
    torch = env.get("torch") if isinstance(env.get("torch"), dict) else {}
    fp.setdefault("torch", torch.get("version"))
    fp.setdefault("torch_cuda", torch.get("cuda"))
    return fp


# ---------------------------------------------------------------------------------------------
# Jobs

def plan(manifest, device, only):
    """(jobs, not_applicable): one job per entry and variant that runs on `device`."""
    wanted = VARIANTS[device]
    jobs, skipped = [], []
    for kind in ("hacks", "legit"):
        for e in manifest.get(kind, []):
            if only and e["name"] not in only:
                continue
            base = os.path.join(common.ROOT, e.get("dir") or os.path.join("examples", "hacks", e["name"]))
            variants = [v for v in e["variants"] if v in wanted]
            if not variants:
                skipped.append({"kind": kind, "name": e["name"], "class": e.get("class"), "variants": e["variants"]})
            for v in variants:
                expect = ((e.get("expect_by_variant") or {}).get(v) or e.get("expect") if kind == "hacks"
                          else {"outcome": "ok", "reason": None})
                jobs.append({"kind": "hack" if kind == "hacks" else "legit", "name": e["name"], "class": e.get("class"),
                             "variant": v, "task": os.path.join(common.ROOT, e["task"]),
                             "candidate": os.path.join(base, v), "args": list(e.get("args", [])), "expect": expect})
    return jobs, skipped


def evaluate(anvil, job, extra, defenses_off):
    """Runs one `anvil eval --json`; returns the job with `result` (the JSON, or an error) and `seconds`."""
    cmd = [anvil, "eval", "--json", "--task", job["task"], "--candidate", job["candidate"], *job["args"], *extra]
    if defenses_off:
        cmd.append("--no-defenses")
    t0 = time.perf_counter()
    try:
        env = dict(os.environ, **job["env"]) if job.get("env") else None
        # errors="replace": a crashed anvil's output need not be UTF-8, and is reported, not raised
        r = subprocess.run(cmd, capture_output=True, text=True, errors="replace", timeout=EVAL_TIMEOUT_S, env=env)
        out, err, code = r.stdout, r.stderr, r.returncode
    except subprocess.TimeoutExpired as e:
        out, err, code = e.stdout or "", "the evaluation ran past %d s" % EVAL_TIMEOUT_S, None
        out = out.decode() if isinstance(out, bytes) else out
    seconds = time.perf_counter() - t0
    try:
        result = json.loads(out)
    except json.JSONDecodeError:
        result = None
    if not isinstance(result, dict) or "outcome" not in result:  # exit 2: anvil could not evaluate
        said = (result or {}).get("error") or (result or {}).get("message") if isinstance(result, dict) else None
        why = [l.strip() for l in (err or out or "").splitlines() if l.strip() and not l.startswith("Run with --help")]
        result = dict(result if isinstance(result, dict) else {}, outcome=None, error="could not evaluate (exit %s): %s" % (
            code, said or (why[-1] if why else "no output")))
    return dict(job, cmd=cmd, exit=code, seconds=round(seconds, 3), result=result)


def flags_of(result):
    task = result.get("task") if isinstance(result.get("task"), dict) else {}
    return [f.get("flag") if isinstance(f, dict) else f for f in task.get("flags") or []]


def judge(job):
    """Whether the result meets the expectation (a hack caught, or an honest candidate passed)."""
    r, want = job["result"], job["expect"]
    if r.get("outcome") not in (want["outcome"] if isinstance(want["outcome"], list) else [want["outcome"]]):
        return False
    if "reason" in want and r.get("reason") not in (want["reason"] if isinstance(want["reason"], list)
                                                     else [want["reason"]]):
        return False
    if "task_flag" in want and want["task_flag"] not in flags_of(r):
        return False
    return True


def describe_expect(want):
    s = "|".join(want["outcome"]) if isinstance(want["outcome"], list) else want["outcome"]
    if want.get("reason"):
        s += "/" + ("|".join(want["reason"]) if isinstance(want["reason"], list) else want["reason"])
    if want.get("task_flag"):
        s += " +" + want["task_flag"]
    return s


def describe_got(r):
    if r.get("outcome") is None:
        return r.get("error", "no result")[:100]
    s = r["outcome"]
    if r.get("reason"):
        s += "/" + (r["reason"] if isinstance(r["reason"], str) else json.dumps(r["reason"]))  # a schema-breaking one shown
    flags = [f for f in flags_of(r) if f]
    if flags:
        s += " +" + ",".join(flags)
    if r["outcome"] == "ok" and r.get("reward") is not None:
        s += " (reward %s)" % r["reward"]
    return s


def run_all(anvil, jobs, extra, defenses_off, workers):
    done = []
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        futures = [pool.submit(evaluate, anvil, j, extra, defenses_off) for j in jobs]
        for f in concurrent.futures.as_completed(futures):
            j = f.result()
            j["pass"] = judge(j)
            done.append(j)
            print("  %-22s %-11s %-28s %s (%.1f s)" % (j["name"], j["variant"], describe_got(j["result"]),
                                                         "caught" if j["kind"] == "hack" and j["pass"] else
                                                         "ok" if j["pass"] else "FAILED", j["seconds"]), flush=True)
    position = {(j["kind"], j["name"], j["variant"]): i for i, j in enumerate(jobs)}
    return sorted(done, key=lambda j: position[(j["kind"], j["name"], j["variant"])])


def table(done, skipped, device, defenses_off):
    lines = ["# Hack suite (%s, defenses %s)" % (device, "off" if defenses_off else "on"), "",
             "| name | class | variant | expected | got | caught | seconds |", "|---|---|---|---|---|---|---|"]
    for j in (j for j in done if j["kind"] == "hack"):
        lines.append("| %s | %s | %s | %s | %s | %s | %.1f |" % (
            j["name"], j["class"], j["variant"], describe_expect(j["expect"]), describe_got(j["result"]),
            "yes" if j["pass"] else "**no**", j["seconds"]))
    for s in (s for s in skipped if s["kind"] == "hacks"):
        lines.append("| %s | %s | %s | not applicable on %s | | | |" % (s["name"], s["class"], ",".join(s["variants"]),
                                                                        device))
    legit = [j for j in done if j["kind"] == "legit"]
    if legit:
        lines += ["", "| honest candidate | variant | expected | got | passed | seconds |", "|---|---|---|---|---|---|"]
        for j in legit:
            lines.append("| %s | %s | ok | %s | %s | %.1f |" % (j["name"], j["variant"], describe_got(j["result"]),
                                                                "yes" if j["pass"] else "**FLAGGED**", j["seconds"]))
    hacks = [j for j in done if j["kind"] == "hack"]
    lines += ["", "hacks caught: %d of %d; honest candidates passed: %d of %d; not applicable on %s: %s" % (
        sum(j["pass"] for j in hacks), len(hacks), sum(j["pass"] for j in legit), len(legit), device,
        ", ".join(s["name"] for s in skipped) or "none")]
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------------------
# Overhead of the defenses

def settle(device, limit_s=20.0):
    """Wait until no process computes on the GPU (the previous evaluation's processes are killed
    when their report is complete and may still be tearing their CUDA contexts down), so that each
    timed evaluation starts from an idle GPU; returns the seconds waited (0 on the CPU)."""
    smi = shutil.which("nvidia-smi") if device == "cuda" else None
    if not smi:
        return 0.0
    start = time.perf_counter()
    while time.perf_counter() - start < limit_s:
        r = common.sh([smi, "--query-compute-apps=pid", "--format=csv,noheader"])
        if r.returncode != 0 or not r.stdout.strip():
            break
        time.sleep(0.05)
    return time.perf_counter() - start


def overhead(anvil, jobs, extra, runs=OVERHEAD_RUNS, device="cuda"):
    """Per honest candidate, after one warm-up evaluation each way (builds, baselines): `runs`
    evaluations with defenses on and off, alternating, each started on an idle GPU (settle()): the
    ratio of the median wall times is the latency the defenses add. Then `runs` evaluations each
    way back to back, as an RL loop issues them (one's teardown overlapping the next one's start):
    the ratio of the summed wall times is the throughput they cost."""
    rows = []
    for job in (j for j in jobs if j["kind"] == "legit"):
        warm = evaluate(anvil, job, extra, False)
        warm_off = evaluate(anvil, job, extra, True)
        on, off, outcomes, phases, waited = [], [], [], {"on": [], "off": []}, []
        for _ in range(runs):
            for defenses_off, into in ((False, on), (True, off)):
                waited.append(settle(device))
                r = evaluate(anvil, job, extra, defenses_off)
                into.append(r["seconds"])
                outcomes.append(("off" if defenses_off else "on", describe_got(r["result"])))
                # where the time went: anvil's stages, and the judge's and candidate's phases
                phases["off" if defenses_off else "on"].append({
                    "anvil": (r["result"] or {}).get("seconds"),
                    "ended": ((r["result"] or {}).get("isolation") or {}).get("ended"),
                    "defenses": ((r["result"] or {}).get("defenses") or {}).get("seconds"),
                    "batch": {k: (((r["result"] or {}).get("timing") or {}).get(k) or {}).get("batch")
                              for k in ("candidate", "eager")}})
        back_to_back = {}
        for side, defenses_off in (("on", False), ("off", True)):
            settle(device)
            start = time.perf_counter()
            for _ in range(runs):
                r = evaluate(anvil, job, extra, defenses_off)
                outcomes.append(("%s, back to back" % side, describe_got(r["result"])))
            back_to_back[side] = time.perf_counter() - start
        ratio = common.median(on) / common.median(off) if off and common.median(off) > 0 else None
        rows.append({"name": job["name"], "variant": job["variant"], "warmup_s": warm["seconds"],
                     "warmup": describe_got(warm["result"]), "warmup_off": describe_got(warm_off["result"]),
                     "on_s": on, "off_s": off, "ratio": ratio, "settle_s": waited,
                     "back_to_back_s": back_to_back,
                     "back_to_back_ratio": back_to_back["on"] / back_to_back["off"] if back_to_back["off"] else None,
                     "outcomes": outcomes, "phases": phases})
        print("  %-22s %-11s on %s off %s ratio %s; back to back %.2f s / %.2f s" % (
            job["name"], job["variant"], on, off, "%.3f" % ratio if ratio else "-", back_to_back["on"],
            back_to_back["off"]), flush=True)
    ratios = [r["ratio"] for r in rows if r["ratio"]]
    total_on = sum(common.median(r["on_s"]) for r in rows)
    total_off = sum(common.median(r["off_s"]) for r in rows)
    b2b_on = sum(r["back_to_back_s"]["on"] for r in rows)
    b2b_off = sum(r["back_to_back_s"]["off"] for r in rows)
    summary = {"median_ratio": common.median(ratios) if ratios else None,
               "max_ratio": max(ratios) if ratios else None,
               "total_ratio": total_on / total_off if total_off > 0 else None,
               "back_to_back_ratio": b2b_on / b2b_off if b2b_off > 0 else None, "bar": OVERHEAD_BAR}
    lines = ["# Defense overhead (wall time of `anvil eval`, %d runs each way)" % runs, "",
             "Latency: evaluations alternating on and off, each started on an idle GPU; the ratio of the "
             "medians. Back to back: %d evaluations each way in a row, as an RL loop issues them." % runs, "",
             "| candidate | variant | on, s | off, s | on / off | back to back on / off |", "|---|---|---|---|---|---|"]
    for r in rows:
        lines.append("| %s | %s | %s | %s | %s | %.2f / %.2f s = %s |" % (
            r["name"], r["variant"], ", ".join("%.2f" % x for x in r["on_s"]), ", ".join("%.2f" % x for x in r["off_s"]),
            "%.3f" % r["ratio"] if r["ratio"] else "-", r["back_to_back_s"]["on"], r["back_to_back_s"]["off"],
            "%.3f" % r["back_to_back_ratio"] if r["back_to_back_ratio"] else "-"))

    def fmt(x):
        return "%.3f" % x if x is not None else "-"

    lines += ["", "overall: median of the ratios %s (largest %s), ratio of the summed medians %s, back to back %s "
              "(bar %.2f)" % (fmt(summary["median_ratio"]), fmt(summary["max_ratio"]), fmt(summary["total_ratio"]),
                              fmt(summary["back_to_back_ratio"]), OVERHEAD_BAR)]
    return rows, summary, "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", choices=sorted(VARIANTS), default=None,
                    help="which variants to run (default: cuda when a GPU is visible, else cpu)")
    ap.add_argument("--anvil", default=None, help="the anvil binary (default: $ANVIL_BIN, else build/anvil)")
    ap.add_argument("--manifest", default=MANIFEST)
    ap.add_argument("--only", default="", help="comma-separated entry names (hacks or honest candidates)")
    ap.add_argument("--jobs", type=int, default=1, help="evaluations at once on the CPU (cuda: always 1)")
    ap.add_argument("--out", default=None, help="write every result and the fingerprint to this JSON file")
    ap.add_argument("--defenses-off", action="store_true", help="pass --no-defenses to anvil eval")
    ap.add_argument("--runs", type=int, default=OVERHEAD_RUNS, help="with --overhead: evaluations per side "
                    "(default %d)" % OVERHEAD_RUNS)
    ap.add_argument("--overhead", action="store_true",
                    help="time the honest candidates with defenses on and off instead of running the suite")
    ap.add_argument("--with-compile", action="store_true", help="CPU: keep the torch.compile baseline")
    ap.add_argument("--eval-arg", action="append", default=[],
                    help="one more argument for every anvil eval (--eval-arg=--calls --eval-arg=10)")
    a = ap.parse_args()

    anvil = os.path.abspath(a.anvil or os.environ.get("ANVIL_BIN") or os.path.join(common.ROOT, "build", "anvil"))
    if not os.access(anvil, os.X_OK):
        sys.exit("hack_suite: no anvil binary at %s (build it: cmake -S . -B build -G Ninja && ninja -C build)" % anvil)
    device = a.device or ("cuda" if gpu_present() else "cpu")
    with open(a.manifest) as f:
        manifest = json.load(f)
    only = {s.strip() for s in a.only.split(",") if s.strip()}
    names = {e["name"] for k in ("hacks", "legit") for e in manifest.get(k, [])}
    if only - names:
        sys.exit("hack_suite: --only names no manifest entry: %s" % ", ".join(sorted(only - names)))
    jobs, skipped = plan(manifest, device, only)
    extra = list(a.eval_arg)
    if device == "cpu" and not a.with_compile:
        extra += ["--compile-mode", "none"]
    workers = a.jobs if device == "cpu" and not a.overhead else 1
    if a.jobs > 1 and workers == 1:
        print("hack_suite: --jobs %d ignored (%s): evaluations run one at a time" % (
            a.jobs, "overhead timing" if a.overhead else "one GPU"), flush=True)

    fp = fingerprint(anvil)
    out = {"fingerprint": fp, "device": device, "anvil": anvil, "manifest": os.path.relpath(a.manifest, common.ROOT),
           "eval_args": extra, "defenses": "off" if a.defenses_off else "on"}
    if a.overhead:
        print("overhead: %d honest candidates on %s" % (sum(j["kind"] == "legit" for j in jobs), device), flush=True)
        rows, summary, text = overhead(anvil, jobs, extra, a.runs, device)
        out.update(overhead=rows, summary=summary)
        ok = summary["median_ratio"] is not None and summary["median_ratio"] <= OVERHEAD_BAR
    else:
        print("hack suite: %d evaluations on %s (%d at a time), defenses %s" % (
            len(jobs), device, workers, out["defenses"]), flush=True)
        done = run_all(anvil, jobs, extra, a.defenses_off, workers)
        text = table(done, skipped, device, a.defenses_off)
        missed = [j for j in done if j["kind"] == "hack" and not j["pass"]]
        flagged = [j for j in done if j["kind"] == "legit" and not j["pass"]]
        out.update(results=[{k: j[k] for k in ("kind", "name", "class", "variant", "task", "candidate", "args", "cmd",
                                                "exit", "expect", "pass", "seconds", "result")} for j in done],
                   not_applicable=skipped,
                   summary={"hacks": sum(j["kind"] == "hack" for j in done), "caught": sum(
                       j["kind"] == "hack" and j["pass"] for j in done), "missed": [
                       "%s/%s" % (j["name"], j["variant"]) for j in missed], "legit": sum(
                       j["kind"] == "legit" for j in done), "flagged": ["%s/%s" % (j["name"], j["variant"])
                                                                        for j in flagged]})
        ok = not missed and not flagged
    print()
    print(text, end="")
    if a.out:
        os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
        with open(a.out, "w") as f:
            json.dump(out, f, indent=2)
        head = "Device: %s, driver %s, torch %s (CUDA %s), anvil %s, %s. `python3 bench/hack_suite.py %s`\n\n" % (
            fp.get("device") or platform.processor() or "cpu", fp.get("driver", "-"), fp.get("torch"),
            fp.get("torch_cuda"), fp.get("anvil_rev"), fp.get("date"), " ".join(sys.argv[1:]))
        with open(os.path.splitext(a.out)[0] + ".md", "w") as f:
            f.write(head + text)
        print("results: %s (and .md)" % a.out)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
