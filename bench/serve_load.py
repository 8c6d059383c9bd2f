"""`anvil serve` under load (issue 18's bars): many clients submitting the bundled candidates at
once, the server killed with SIGKILL part-way and restarted on the same state, and then:

- every accepted request answered, none twice (each idempotency key has one id, each id one result);
- latency per call kind (the server's own histograms) and, per evaluation, accepted-to-done p50/p99;
- the GPU's utilization (nvidia-smi, every 0.5 s) while evaluations were queued;
- throughput against the same evaluations run one after another with `anvil eval`;
- the service's overhead over a direct `anvil eval` of one cached candidate (medians of N each).

    python3 bench/serve_load.py --device cuda --clients 64 --duration 300 --kill-at 150 --out r.json
    python3 bench/serve_load.py --device cpu --clients 4 --duration 40 --kill-at 20   # a CPU run

Prints one JSON document (also to --out) and a few summary lines on stderr.
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
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "python"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from common import ANVIL, ROOT, fingerprint, median  # noqa: E402
from anvil.client import Client, ServeError  # noqa: E402

PAIRS = ["01_elementwise_chain", "02_softmax", "03_layernorm", "04_gemm_bias_relu", "05_conv_bias_relu",
         "06_mlp_block"]


def pct(xs, q):
    s = sorted(xs)
    return round(s[min(len(s) - 1, int(q * len(s)))], 4) if s else None


class Server:
    def __init__(self, state, device, extra):
        self.state, self.device, self.extra = state, device, extra
        self.proc, self.url = None, None

    def start(self):
        self.proc = subprocess.Popen([ANVIL, "serve", "--port", str(getattr(self, "port", 0)), "--device", self.device,
                                      "--state", self.state] + self.extra,
                                     stdout=subprocess.PIPE, stderr=open(self.state + ".stderr", "a"), text=True,
                                     start_new_session=True)
        line = self.proc.stdout.readline()
        m = re.match(r"anvil serve: (http://127\.0\.0\.1:(\d+)) ", line)
        if not m:
            raise RuntimeError("the server did not start: %r (see %s.stderr)" % (line, self.state))
        self.url, self.port = m.group(1), int(m.group(2))  # a restart takes the same port
        return self.url

    def kill9(self):
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()

    def stop(self):
        os.killpg(self.proc.pid, signal.SIGTERM)
        return self.proc.wait(timeout=900)


class GpuSampler(threading.Thread):
    """nvidia-smi's utilization.gpu every 0.5 s, with the time of each sample."""

    def __init__(self):
        super().__init__(daemon=True)
        self.samples, self.stop = [], threading.Event()

    def run(self):
        try:
            p = subprocess.Popen(["nvidia-smi", "--query-gpu=utilization.gpu", "--format=csv,noheader,nounits",
                                  "-lms", "500", "-i", "0"], stdout=subprocess.PIPE, text=True)
        except FileNotFoundError:
            return
        for line in p.stdout:
            if self.stop.is_set():
                break
            try:
                self.samples.append((time.time(), float(line.strip())))
            except ValueError:
                pass
        p.kill()


def requests_for(device, task_dir):
    return [({"path": os.path.join(task_dir, p + ".py")},
             {"path": os.path.join(ROOT, "examples", "candidates", p, device)}) for p in PAIRS
            if os.path.isdir(os.path.join(ROOT, "examples", "candidates", p, device))]


async def client_loop(url, reqs, k, deadline, log):
    """One client: evaluations one after another until the deadline; each one's key, id, result."""
    async with Client(url, timeout=120) as c:
        n = 0
        while time.time() < deadline:
            task, cand = reqs[(k + n) % len(reqs)]
            key = "c%d-%d" % (k, n)
            t0 = time.time()
            try:
                eid = await c.submit(task, cand, {"seed": k * 1000 + n}, key=key)
                r = await c.wait(eid, limit=900)
                log.append({"key": key, "id": eid, "status": r["status"], "outcome": r.get("outcome"),
                            "attempts": r.get("attempts"), "latency_s": time.time() - t0, "done_at": time.time()})
            except (ServeError, OSError) as e:
                log.append({"key": key, "id": None, "error": str(e)[:200], "latency_s": time.time() - t0})
            n += 1


async def metrics_loop(url, deadline, depth):
    """The queue's depth every second (to know when it was saturated)."""
    async with Client(url) as c:
        while time.time() < deadline + 5:
            try:
                m = await c.metrics()
                q = re.search(r"^anvil_queue_depth (\d+)", m, re.M)
                depth.append((time.time(), int(q.group(1)) if q else None))
            except Exception:  # noqa: BLE001 - the server is down for its restart
                depth.append((time.time(), None))
            await asyncio.sleep(1.0)


def direct_eval(device, task, cand, seed, extra):
    t0 = time.time()
    r = subprocess.run([ANVIL, "eval", "--json", "--device", device, "--task", task["path"], "--candidate",
                        cand["path"], "--seed", str(seed)] + extra, capture_output=True, text=True)
    wall = time.time() - t0
    try:
        return wall, json.loads(r.stdout).get("outcome")
    except json.JSONDecodeError:
        return wall, "no result: " + r.stderr[-200:]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--clients", type=int, default=64)
    ap.add_argument("--duration", type=float, default=300)
    ap.add_argument("--kill-at", type=float, default=None, help="seconds in: SIGKILL the server, restart it")
    ap.add_argument("--overhead-runs", type=int, default=10)
    ap.add_argument("--tasks", default=os.path.join(ROOT, "examples", "tasks"))
    ap.add_argument("--eval-args", default="", help="evaluation settings for the server and the direct runs")
    ap.add_argument("--out")
    a = ap.parse_args()
    extra = a.eval_args.split()
    reqs = requests_for(a.device, a.tasks)
    state = tempfile.mkdtemp(prefix="serve-load-") + "/state"
    srv = Server(state, a.device, extra)
    doc = {"fingerprint": fingerprint(), "device": a.device, "clients": a.clients, "duration_s": a.duration,
           "kill_at_s": a.kill_at, "pairs": [p for p in PAIRS][:len(reqs)], "eval_args": extra}
    url = srv.start()

    # The service's overhead over a direct `anvil eval` of one cached candidate (warmed once each).
    task, cand = reqs[0]

    async def one(seed):
        async with Client(url) as c:
            t0 = time.time()
            r = await c.evaluate(task, cand, {"seed": seed}, limit=900)
            return time.time() - t0, r.get("outcome")

    asyncio.run(one(1))
    direct_eval(a.device, task, cand, 1, extra)
    served = [asyncio.run(one(100 + i)) for i in range(a.overhead_runs)]
    direct = [direct_eval(a.device, task, cand, 100 + i, extra) for i in range(a.overhead_runs)]
    doc["overhead"] = {"served_s": [round(s, 4) for s, _ in served], "direct_s": [round(s, 4) for s, _ in direct],
                       "outcomes": sorted({o for _, o in served + direct}),
                       "median_overhead_ms": round(1000 * (median([s for s, _ in served]) -
                                                           median([s for s, _ in direct])), 1)}

    # Throughput one after another (`anvil eval` of each pair in turn), the baseline of the load's.
    t0 = time.time()
    seq = [direct_eval(a.device, t, c, 7, extra) for t, c in reqs]
    doc["sequential"] = {"evaluations": len(seq), "seconds": round(time.time() - t0, 2),
                         "per_minute": round(60 * len(seq) / (time.time() - t0), 2)}

    # The load, with a SIGKILL and a restart part-way.
    log, depth = [], []
    sampler = GpuSampler()
    sampler.start()
    start = time.time()
    deadline = start + a.duration

    async def load():
        tasks = [asyncio.create_task(client_loop(url, reqs, k, deadline, log)) for k in range(a.clients)]
        tasks.append(asyncio.create_task(metrics_loop(url, deadline, depth)))
        if a.kill_at is not None:
            await asyncio.sleep(a.kill_at)
            srv.kill9()
            doc["killed_at_s"] = round(time.time() - start, 2)
            await asyncio.to_thread(srv.start)
            doc["restarted_after_s"] = round(time.time() - start - doc["killed_at_s"], 2)
        await asyncio.gather(*tasks)

    asyncio.run(load())
    sampler.stop.set()
    end = time.time()

    async def final_metrics():
        async with Client(url) as c:
            return await c.metrics()

    metrics = asyncio.run(final_metrics())
    srv.stop()

    by_key = {}
    for e in log:
        by_key.setdefault(e["key"], set()).add(e["id"])
    done = [e for e in log if e.get("status") == "done"]
    lat = [e["latency_s"] for e in done]
    saturated = [t for t, d in depth if d]
    busy = [u for t, u in sampler.samples if saturated and saturated[0] <= t <= saturated[-1]]
    doc["load"] = {
        "submitted": len(log), "done": len(done), "errors": [e["error"] for e in log if "error" in e][:10],
        "not_done": [e for e in log if e.get("id") and e.get("status") != "done"][:10],
        "keys_with_two_ids": [k for k, ids in by_key.items() if len(ids) > 1],
        "outcomes": {o: sum(1 for e in done if e["outcome"] == o) for o in sorted({e["outcome"] for e in done})},
        "rerun_after_kill": sum(1 for e in done if (e.get("attempts") or 0) > 1),
        "latency_p50_s": pct(lat, 0.5), "latency_p99_s": pct(lat, 0.99),
        "per_minute": round(60 * len(done) / (end - start), 2),
        "gpu_util_while_queued_mean": round(sum(busy) / len(busy), 1) if busy else None,
        "gpu_util_samples": len(busy),
    }
    doc["server_histograms"] = [l for l in metrics.splitlines() if l.startswith("anvil_request_seconds_")
                                and ('le="+Inf"' in l or "_sum" in l)]
    text = json.dumps(doc, indent=1)
    print(text)
    if a.out:
        open(a.out, "w").write(text + "\n")
    ld = doc["load"]
    print("overhead: median %s ms (served %s s, direct %s s); sequential %s/min; load %d done of %d submitted "
          "(%d errors, %d keys with two ids, %d run again after the kill), %s/min, p50 %s s p99 %s s, GPU %s%% busy "
          "while queued" % (doc["overhead"]["median_overhead_ms"], median(doc["overhead"]["served_s"]),
                            median(doc["overhead"]["direct_s"]), doc["sequential"]["per_minute"], ld["done"],
                            ld["submitted"], len(ld["errors"]), len(ld["keys_with_two_ids"]),
                            ld["rerun_after_kill"], ld["per_minute"], ld["latency_p50_s"], ld["latency_p99_s"],
                            ld["gpu_util_while_queued_mean"]), file=sys.stderr)


if __name__ == "__main__":
    main()
