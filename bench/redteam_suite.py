#!/usr/bin/env python3
"""The red team: every attack of examples/redteam/manifest.json must end with reward -1 and the
expected outcome and reason, leave nothing behind, and change nothing it must not; the honest
entries must pass.

    python3 bench/redteam_suite.py [--device cpu|cuda] [--only NAME,...] [--out FILE.json] [--anvil PATH]

For each attack: its setup files are written, `anvil eval --json --task TASK --candidate ...` runs
(a single file's model_new.py, or a workdir), and the result must give expect.outcome and
expect.reason, reward -1 (or expect.reward), and pass the entry's checks (the manifest's "doc" says
what each means; an entry's expect_cpu replaces its expect on the CPU). An entry's `files` are written
into its candidate's directory for the run and removed after: names git should not carry (bytes that
are not UTF-8, a directory named like anvil's module, 254-byte names).
A `concurrent` honest evaluation runs at the same time as the attack. Prints a table, writes every
result with the environment's fingerprint to --out (and a .md beside it), and exits 1 if an
attack got through, a check failed or an honest entry was flagged. On the CPU the evaluations skip
the torch.compile baseline (--compile-mode none).
"""
import argparse
import concurrent.futures
import glob
import json
import os
import platform
import shutil
import socket
import struct
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
import hack_suite  # noqa: E402

MANIFEST = os.path.join(common.ROOT, "examples", "redteam", "manifest.json")
PROCESS_GRACE_S = 2.0  # a killed process is gone within this after anvil answered


def zygotes():
    """{socket path: pid} of the warm zygotes of this user that answer now. The pid is the one
    that listens on the socket, as the kernel says (SO_PEERCRED), not one guessed from /proc: a
    zygote's children share its command line until they exec, and once pids wrap (pid_max 32768)
    an orphaned child of the zygote may have the smaller pid."""
    paths = set()
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open("/proc/%s/cmdline" % pid, "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        if b"--socket" in argv and any(b"zygote" in a for a in argv) and argv.index(b"--socket") + 1 < len(argv):
            paths.add(argv[argv.index(b"--socket") + 1].decode())
    found = {}
    for path in paths:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.connect(path)
            pid, _, _ = struct.unpack("3i", s.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i")))
            found[path] = pid
        except OSError:
            pass
        finally:
            s.close()
    return found


def processes_with(marker):
    hits = []
    for pid in os.listdir("/proc"):
        try:
            with open("/proc/%s/cmdline" % pid, "rb") as f:
                if marker.encode() in f.read():
                    hits.append(int(pid))
        except (OSError, ValueError):
            pass
    return hits


def job_of(entry, task, kind, extra, device):
    base = os.path.join(common.ROOT, "examples", "redteam", entry["name"])
    candidate = os.path.join(base, "model_new.py") if entry["kind"] == "file" else base
    task = os.path.join(common.ROOT, entry["task"]) if entry.get("task") else task
    return {"kind": kind, "name": entry["name"], "class": entry.get("class"), "variant": entry["kind"],
            "task": task, "candidate": candidate, "args": list(entry.get("args", [])) + extra,
            "expect": entry.get("expect_" + device) or entry["expect"], "env": entry.get("env"), "checks": entry.get("checks") or {},
            "setup": entry.get("setup") or {}, "files": entry.get("files") or {}, "base": base}


def write_files(base, files):
    """Writes an entry's `files` under its candidate's directory; returns what to remove after (each
    file, and the first directory on its way that was not there). Lone surrogates (\\udcff) in a name
    or a text stand for bytes that are not UTF-8, as os.fsencode reads them."""
    made, root = [], os.fsencode(base)
    for rel, text in files.items():
        parts = os.fsencode(rel).split(b"/")
        d = root
        for part in parts[:-1]:
            d = os.path.join(d, part)
            if not os.path.exists(d):
                os.makedirs(os.path.join(root, *parts[:-1]))
                made.append(d)
                break
        path = os.path.join(root, *parts)
        with open(path, "wb") as f:
            f.write(text.encode("utf-8", "surrogateescape"))
        made.append(path)
    return made


def remove_files(made):
    for path in reversed(made):
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, ignore_errors=True)
        elif os.path.lexists(path):
            os.unlink(path)


def cache_path(pattern):
    """A manifest's path in anvil's default cache (~/.cache/anvil/...) as the cache anvil uses here
    ($ANVIL_CACHE when set, as under the tests)."""
    cache = os.environ.get("ANVIL_CACHE")
    return pattern.replace("~/.cache/anvil", cache, 1) if cache and pattern.startswith("~/.cache/anvil") else pattern


def check(job, before_zygotes, concurrent_result):
    """The failed checks of one finished attack, as lines."""
    r, c, failed = job["result"], job["checks"], []
    text = json.dumps(r)
    reward = job["expect"].get("reward", -1)
    rewards = reward if isinstance(reward, list) else [reward]
    if r.get("outcome") is not None and r.get("reward") not in rewards:
        failed.append("reward %s, not %s" % (r.get("reward"), " or ".join(str(x) for x in rewards)))
    if job["expect"].get("uncredited") and (r.get("timing") or {}).get("speed_credited") is not False:
        failed.append("the result does not say no speed is credited (timing.speed_credited)")
    for path in c.get("absent", []):
        if os.path.exists(path):
            failed.append("%s exists" % path)
    for pattern in c.get("absent_glob", []):
        hits = glob.glob(os.path.expanduser(cache_path(pattern)))
        if hits:
            failed.append("%s exist" % ", ".join(hits))
    for marker in c.get("no_process", []):
        # anvil answers at the report and kills the runner without waiting for its teardown: the
        # namespace's thousands of killed processes (fork_bomb) may take a moment to be gone.
        deadline = time.monotonic() + PROCESS_GRACE_S
        while processes_with(marker) and time.monotonic() < deadline:
            time.sleep(0.05)
        if processes_with(marker):
            failed.append("a process holding %r outlived the evaluation (by %.0f s)" % (marker, PROCESS_GRACE_S))
    for needle in c.get("not_in_result", []):
        if needle in text:
            failed.append("%r appears in the result" % needle)
    if c.get("in_result") and c["in_result"] not in text:
        failed.append("%r does not appear in the result" % c["in_result"])
    if c.get("in_message") and c["in_message"] not in (r.get("message") or ""):
        failed.append("the message does not name %r: %s" % (c["in_message"], (r.get("message") or "")[:200]))
    if "exit" in c and job.get("exit") != c["exit"]:
        code = job.get("exit")
        failed.append("anvil exited with %s, not %s%s" % (
            code, c["exit"], " (killed by signal %d: no verdict)" % -code if isinstance(code, int) and code < 0 else ""))
    if c.get("zygote_alive"):
        after = zygotes()
        gone = [p for p, pid in before_zygotes.items() if after.get(p) != pid]
        if gone:
            failed.append("the warm zygote at %s no longer answers" % ", ".join(gone))
    if c.get("concurrent") and (concurrent_result or {}).get("outcome") != "ok":
        failed.append("the concurrent honest evaluation came out %s" % hack_suite.describe_got(concurrent_result or {}))
    return failed


def run_one(anvil, job, legit_by_name, extra_args):
    for path, text in job["setup"].items():
        with open(path, "w") as f:
            f.write(text)
    before = zygotes()
    partner = job["checks"].get("concurrent")
    made = write_files(job["base"], job["files"])
    try:
        with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
            mate = pool.submit(hack_suite.evaluate, anvil, legit_by_name[partner], [], False) if partner else None
            done = hack_suite.evaluate(anvil, job, [], False)
            mate_result = mate.result()["result"] if mate else None
    finally:
        remove_files(made)
    done["pass"] = hack_suite.judge(done)
    done["failed_checks"] = check(done, before, mate_result) if done["kind"] == "attack" else []
    done["pass"] = done["pass"] and not done["failed_checks"]
    return done


def table(done, device):
    lines = ["# Red team (%s)" % device, "", "| attack | class | expected | got | caught | checks | seconds |",
             "|---|---|---|---|---|---|---|"]
    for j in done:
        if j["kind"] != "attack":
            continue
        lines.append("| %s | %s | %s | %s | %s | %s | %.1f |" % (
            j["name"], j["class"], hack_suite.describe_expect(j["expect"]), hack_suite.describe_got(j["result"]),
            "yes" if j["pass"] else "**no**", "; ".join(j["failed_checks"]) or "all hold", j["seconds"]))
    legit = [j for j in done if j["kind"] == "legit"]
    for j in legit:
        lines.append("| %s (honest) | - | ok | %s | %s | - | %.1f |" % (
            j["name"], hack_suite.describe_got(j["result"]), "passed" if j["pass"] else "**FLAGGED**", j["seconds"]))
    attacks = [j for j in done if j["kind"] == "attack"]
    lines += ["", "attacks caught: %d of %d; honest entries passed: %d of %d" % (
        sum(j["pass"] for j in attacks), len(attacks), sum(j["pass"] for j in legit), len(legit))]
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", choices=("cpu", "cuda"), default=None)
    ap.add_argument("--anvil", default=None)
    ap.add_argument("--manifest", default=MANIFEST)
    ap.add_argument("--only", default="")
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    anvil = os.path.abspath(a.anvil or os.environ.get("ANVIL_BIN") or os.path.join(common.ROOT, "build", "anvil"))
    if not os.access(anvil, os.X_OK):
        sys.exit("redteam_suite: no anvil binary at %s" % anvil)
    device = a.device or ("cuda" if hack_suite.gpu_present() else "cpu")
    with open(a.manifest) as f:
        manifest = json.load(f)
    only = {s.strip() for s in a.only.split(",") if s.strip()}
    task = os.path.join(common.ROOT, manifest["task"])
    extra = ["--compile-mode", "none"] if device == "cpu" else []
    def here(e):  # an entry that needs a GPU (expect_cpu "skip") is left out on the CPU
        return (e.get("expect_" + device) or e["expect"]) != "skip"

    legit = {e["name"]: job_of(e, task, "legit", extra, device) for e in manifest["legit"] if here(e)}
    jobs = [job_of(e, task, "attack", extra, device) for e in manifest["attacks"]
            if here(e) and (not only or e["name"] in only)]
    print("red team: %d attacks on %s" % (len(jobs), device), flush=True)
    done = []
    for job in list(legit.values()) + jobs:  # the honest entry first: it warms the zygote and the caches
        if only and job["kind"] == "legit" and job["name"] not in only and job["name"] not in {
                j["checks"].get("concurrent") for j in jobs}:
            continue
        d = run_one(anvil, job, legit, extra)
        done.append(d)
        print("  %-22s %-8s %-34s %s%s (%.1f s)" % (
            d["name"], d["variant"], hack_suite.describe_got(d["result"]), "caught" if d["kind"] == "attack" and
            d["pass"] else "ok" if d["pass"] else "FAILED", "" if not d["failed_checks"] else ": " +
            "; ".join(d["failed_checks"]), d["seconds"]), flush=True)
    text = table(done, device)
    print()
    print(text, end="")
    ok = all(j["pass"] for j in done)
    if a.out:
        fp = hack_suite.fingerprint(anvil)
        os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
        with open(a.out, "w") as f:
            json.dump({"fingerprint": fp, "device": device, "results": [
                {k: j.get(k) for k in ("kind", "name", "class", "variant", "cmd", "expect", "pass", "failed_checks",
                                       "seconds", "result")} for j in done]}, f, indent=2)
        head = "Device: %s, driver %s, torch %s (CUDA %s), anvil %s, %s. `python3 bench/redteam_suite.py %s`\n\n" % (
            fp.get("device") or platform.processor() or "cpu", fp.get("driver", "-"), fp.get("torch"),
            fp.get("torch_cuda"), fp.get("anvil_rev"), fp.get("date"), " ".join(sys.argv[1:]))
        with open(os.path.splitext(a.out)[0] + ".md", "w") as f:
            f.write(head + text)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
