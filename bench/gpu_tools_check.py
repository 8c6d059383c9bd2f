#!/usr/bin/env python3
"""The agent's jailed tools on a real GPU, through `anvil serve` sessions: what the jail (its
system-call filter included) must still let through, and what it must not.

    python3 bench/gpu_tools_check.py [--device cuda|cpu] [--out FILE.json]

Two servers, one after the other, each with one session on examples/tasks/01_elementwise_chain.py
(examples/candidates/01_elementwise_chain/cuda written with write_file):
  --bash-gpu   bash sees the GPU (nvidia-smi, torch.cuda in the jail); compile, verify and profile
               judge the candidate; ncu_profile profiles it (where ncu is installed); bash cannot make
               a user namespace (the filter)
  default      bash sees no GPU device node and torch.cuda finds none
Every check must hold (one line each; exit 1 otherwise). Prints the machine's fingerprint first.
"""
import argparse
import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

sys.path.insert(0, os.path.join(common.ROOT, "python"))
from anvil.client import Client  # noqa: E402

GPU_PROBE = ("ls /dev/nvidia* 2>/dev/null | head -3; "
             "\"${ANVIL_PYTHON:-python3}\" -c 'import torch; print(\"cuda\", torch.cuda.is_available())' 2>&1 | tail -1")
USERNS_PROBE = "unshare -Ur true 2>&1; echo \"unshare exit $?\""


def start(state, device, extra):
    proc = subprocess.Popen([common.ANVIL, "serve", "--port", "0", "--device", device, "--state", state] + extra,
                            stdout=subprocess.PIPE, stderr=open(state + ".stderr", "w"), text=True,
                            start_new_session=True)
    m = re.match(r"anvil serve: (http://127\.0\.0\.1:\d+) ", proc.stdout.readline())
    if not m:
        raise SystemExit("the server did not start: see %s.stderr" % state)
    return proc, m.group(1)


def stop(proc):
    os.killpg(proc.pid, signal.SIGTERM)
    proc.wait(timeout=300)


async def session(url, name, variant, calls):
    """The calls' results, in a new session with the example's `variant` written; a call of a tool
    the session does not offer is left out (None in its place)."""
    async with Client(url, tool_timeout=900) as c:
        made = await c.create_session({"path": os.path.join(common.ROOT, "examples", "tasks", name + ".py")})
        offered = {t["function"]["name"] for t in made["tools"]}
        writes = []
        cand = os.path.join(common.ROOT, "examples", "candidates", name, variant)
        for dirpath, _, names in os.walk(cand):
            for n in names:
                path = os.path.join(dirpath, n)
                writes.append({"name": "write_file", "arguments": {"path": os.path.relpath(path, cand),
                                                                   "content": open(path).read()}})
        await c.call_tools(made["id"], writes)
        got = iter(await c.call_tools(made["id"], [x for x in calls if x["name"] in offered]))
        await c.end_session(made["id"])
        return [next(got) if x["name"] in offered else None for x in calls]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--task", default="01_elementwise_chain", help="an example (examples/tasks, examples/candidates)")
    ap.add_argument("--out", default=None)
    ap.add_argument("--device", default="cuda", help="cpu: the plumbing alone (no GPU to see)")
    a = ap.parse_args()
    gpu_host = a.device == "cuda"
    variant = "cuda" if gpu_host else "cpu"
    print(json.dumps(common.fingerprint()), flush=True)
    checks, rows = [], {}
    with tempfile.TemporaryDirectory(prefix="anvil-tools-check-") as tmp:
        proc, url = start(os.path.join(tmp, "gpu"), a.device, ["--bash-gpu"])
        try:
            calls = [{"name": "bash", "arguments": {"command": GPU_PROBE}},
                     {"name": "bash", "arguments": {"command": USERNS_PROBE}},
                     {"name": "compile", "arguments": {}},
                     {"name": "verify", "arguments": {}},
                     {"name": "profile", "arguments": {}},
                     {"name": "ncu_profile", "arguments": {"top": 3}}]
            r = asyncio.run(session(url, a.task, variant, calls))
        finally:
            stop(proc)
        rows["bash_gpu"] = r
        gpu, userns, comp, ver, prof, ncu = r
        if gpu_host:
            checks.append(("--bash-gpu: bash sees the GPU", "cuda True" in gpu["content"]))
        checks.append(("bash cannot make a user namespace", "unshare exit 0" not in userns["content"]))
        checks.append(("compile", comp["content"].startswith("compiled")))
        checks.append(("verify", ver["content"].startswith("CORRECT")))
        checks.append(("profile", not prof["error"] and "reward" in prof["content"]))
        if ncu is None:
            checks.append(("ncu_profile (not offered: no ncu or no GPU)", not gpu_host))
        else:
            checks.append(("ncu_profile", not ncu["error"]))
        proc, url = start(os.path.join(tmp, "nogpu"), a.device, [])
        try:
            r = asyncio.run(session(url, a.task, variant, [{"name": "bash", "arguments": {"command": GPU_PROBE}}]))
        finally:
            stop(proc)
        rows["default"] = r
        checks.append(("default: bash sees no GPU", "cuda False" in r[0]["content"] and "/dev/nvidia" not in r[0]["content"]))
    ok = True
    for name, held in checks:
        print("%-45s %s" % (name, "holds" if held else "FAILS"))
        ok &= held
    for k, results in rows.items():
        for res in filter(None, results):
            print("--- %s %s (%.1f s)\n%s" % (k, res["name"], res["seconds"], res["content"][:1500]))
    if a.out:
        with open(a.out, "w") as f:
            json.dump({"fingerprint": common.fingerprint(), "checks": checks, "results": rows}, f, indent=1)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
