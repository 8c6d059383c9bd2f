"""`anvil serve --ray` on a real Ray cluster of the GPUs of this host (issue 18's "one GPU with the
real cluster of one node"): every bundled example's CUDA candidate judged through the cluster's
workers and directly with `anvil eval` on the same GPU (outcomes equal, speedups side by side), a
worker's server killed under an evaluation (run again once), and what is left after the server
stops. Needs Ray importable (PYTHONPATH) and the cluster started (bench/gpu_ray_check.sh does both).

    python3 bench/ray_check.py --address 127.0.0.1:6399 --out DIR
"""
import argparse
import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "python"))
from anvil.client import Client  # noqa: E402
from anvil.ray_pool import worker_servers  # noqa: E402

EXAMPLES = ["01_elementwise_chain", "02_softmax", "03_layernorm", "04_gemm_bias_relu", "05_conv_bias_relu",
            "06_mlp_block"]


def pair(name):
    return ({"path": os.path.join(ROOT, "examples", "tasks", name + ".py")},
            {"path": os.path.join(ROOT, "examples", "candidates", name, "cuda")})


def speedup(ev):
    t = (ev or {}).get("timing") or {}
    return t.get("speedup_eager"), t.get("candidate_ms")


async def through_ray(url):
    async with Client(url) as c:
        health = await c.health()
        t0 = time.monotonic()
        results = await asyncio.gather(*[c.evaluate(*pair(n), {"seed": 1}, limit=1800) for n in EXAMPLES])
        wall = time.monotonic() - t0
        # A worker's server killed under an evaluation: run again on a fresh actor.
        sent = await c.submit(*pair("02_softmax"), {"seed": 2})
        lane, deadline = None, time.monotonic() + 300
        while lane is None and time.monotonic() < deadline:
            busy = re.findall(r'anvil_lane_busy\{lane="ray(\d+)"\} 1', await c.metrics())
            lane = int(busy[0]) if busy else None
            await asyncio.sleep(0.05)
        workers = {w["lane"]: w for w in (await c.health())["ray"]["workers"]}
        if lane is not None:
            os.kill(workers[lane]["serve_pid"], signal.SIGKILL)
        killed = await c.wait(sent, limit=1800)
        return health, results, wall, killed, await c.metrics()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--address", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--anvil", default=os.environ.get("ANVIL_BIN") or os.path.join(ROOT, "build", "anvil"))
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    report = {"address": a.address}
    # Direct, one at a time on GPU 0 (the baselines cached for the workers' too: the same cache).
    direct = {}
    for n in EXAMPLES:
        task, cand = pair(n)
        p = subprocess.run([a.anvil, "eval", "--task", task["path"], "--candidate", cand["path"], "--seed", "1", "--json"],
                           capture_output=True, text=True)
        try:
            direct[n] = json.loads(p.stdout)
        except ValueError:
            direct[n] = {"outcome": "error", "message": (p.stderr or p.stdout)[-500:]}
        print("direct %-22s %s %s" % (n, direct[n].get("outcome"), speedup(direct[n])), flush=True)
    state = os.path.join(a.out, "state")
    proc = subprocess.Popen([a.anvil, "serve", "--ray", a.address, "--port", "0", "--state", state,
                             "--ray-python", sys.executable], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    line = proc.stdout.readline()
    m = re.match(r"anvil serve: (http://127\.0\.0\.1:\d+) ", line)
    if not m:
        print("the server did not start: %r %s" % (line, proc.stderr.read()), flush=True)
        return 1
    print(line.strip(), flush=True)
    health, results, wall, killed, metrics = asyncio.run(through_ray(m.group(1)))
    report["health"] = health
    rows = []
    for n, r in zip(EXAMPLES, results):
        d = direct[n]
        rows.append({"example": n, "ray_outcome": r["outcome"], "direct_outcome": d.get("outcome"),
                     "ray_speedup": speedup(r.get("evaluation"))[0], "direct_speedup": speedup(d)[0],
                     "ray_candidate_ms": speedup(r.get("evaluation"))[1], "direct_candidate_ms": speedup(d)[1],
                     "worker": r.get("worker"), "attempts": r["attempts"]})
        print("ray    %-22s %s %s worker gpus %s" % (n, r["outcome"], speedup(r.get("evaluation")),
                                                     (r.get("worker") or {}).get("gpus")), flush=True)
    report["rows"], report["ray_wall_s"] = rows, wall
    report["killed"] = {k: killed.get(k) for k in ("outcome", "attempts", "message")}
    print("killed worker: %s after %s attempts" % (killed["outcome"], killed["attempts"]), flush=True)
    mine = set(worker_servers())
    os.killpg(proc.pid, signal.SIGTERM)
    report["server_exit"] = proc.wait(timeout=120)
    time.sleep(5)
    report["worker_servers_left"] = sorted(set(worker_servers()) & mine)
    report["metrics"] = metrics
    with open(os.path.join(a.out, "ray-check.json"), "w") as f:
        json.dump(report, f, indent=1)
    ok = (all(r["ray_outcome"] == r["direct_outcome"] for r in rows) and killed["attempts"] == 2 and
          not report["worker_servers_left"])
    print("outcomes equal: %s; killed run again: %s; left: %s" % (
        all(r["ray_outcome"] == r["direct_outcome"] for r in rows), killed["attempts"] == 2,
        report["worker_servers_left"]), flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
