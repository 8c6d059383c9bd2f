#!/usr/bin/env python3
"""What slows an evaluation on one GPU while the host's other GPU is busy (issue 24):

    python3 bench/multi_gpu_contention.py --task T.py --candidate DIR [--runs 8] [--out F.json]

The same cached evaluation (`anvil eval --gpu 0`) timed RUNS times under each condition:
- alone: nothing else on the host;
- eval_on_gpu1: the same evaluation in a loop on GPU 1 (what `anvil bench --gpus 0,1` does);
- eval_on_gpu1_fresh: that loop with `--zygote none` (a fresh runner process each time: no shared zygote);
- cpu_load: N busy Python processes (no GPU), N = --cpu-procs, as much host work as that loop;
- gpu1_kernels: GPU 1 kept busy by one process's matrix products (GPU work, little host work);
- gpu1_driver: one process on GPU 1 that makes and frees CUDA events, streams and memory and
  starts and stops the profiler in a loop (driver calls, little GPU or CPU work);
- ctx_loop: one process that makes and destroys GPU 1's CUDA context in a loop (the driver's
  cuDevicePrimaryCtxRetain/Release, as each judge and candidate process does once);
- netns_loop: network namespaces made and dropped in a loop (`unshare --net true`, as the jail does
  for each candidate process), no GPU;
- mntns_loop: mount and PID namespaces (with a /proc) made and dropped in a loop, no GPU.
For each: the evaluation's wall time (median, min, max), the judge's and the runner's phase medians,
the host's CPU steal time over the condition (/proc/stat), and how long making one network namespace
took then (`unshare --net true`, median of 10), so a slow-down can be put on the CPU, the GPU, the
driver or the kernel's namespaces. Standard library only (torch only in the background loads).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import ANVIL, fingerprint  # noqa: E402

BURN = "import time\nt=time.time()\nwhile time.time()-t<3600: pass\n"
KERNELS = ("import torch\na=torch.randn(8192,8192,device='cuda')\n"
           "while True:\n    b=a@a\n    torch.cuda.synchronize()\n")
DRIVER = ("import torch\nfrom torch.profiler import profile, ProfilerActivity\ntorch.zeros(1,device='cuda')\n"
          "while True:\n"
          "    s=torch.cuda.Stream(); e=[torch.cuda.Event(enable_timing=True) for _ in range(8)]\n"
          "    x=torch.empty(64<<20,device='cuda'); del x; torch.cuda.empty_cache()\n"
          "    with profile(activities=[ProfilerActivity.CUDA]):\n"
          "        torch.ones(16,device='cuda').sum().item()\n")


CTX = ("import ctypes\ncu=ctypes.CDLL('libcuda.so.1')\nassert cu.cuInit(0)==0\nd=ctypes.c_int()\n"
       "assert cu.cuDeviceGet(ctypes.byref(d),0)==0\nc=ctypes.c_void_p()\n"
       "while True:\n    assert cu.cuDevicePrimaryCtxRetain(ctypes.byref(c),d)==0\n"
       "    cu.cuDevicePrimaryCtxRelease(d)\n")
NETNS = "while true; do unshare --net true; done"
MNTNS = "while true; do unshare --mount --pid --fork --mount-proc true; done"


PHASES = ("seconds.", "defenses.seconds.", "timing.")


def netns_ms(n=10):
    """Median milliseconds of `unshare --net true` (fork, exec, a network namespace made and dropped)."""
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        subprocess.run(["unshare", "--net", "true"], capture_output=True)
        out.append(1000 * (time.perf_counter() - t0))
    return round(statistics.median(out), 2)


def steal():
    with open("/proc/stat") as fh:
        f = fh.readline().split()
    vals = [int(x) for x in f[1:]]
    return vals[7] if len(vals) > 7 else 0, sum(vals)


def flat(j, p="", out=None):
    out = {} if out is None else out
    if isinstance(j, dict):
        for k, v in j.items():
            flat(v, p + "." + k if p else k, out)
    elif isinstance(j, (int, float)) and not isinstance(j, bool):
        out[p] = j
    return out


def one_eval(a, gpu, seed):
    t0 = time.time()
    r = subprocess.run([ANVIL, "eval", "--json", "--gpu", str(gpu), "--task", a.task, "--candidate", a.candidate,
                        "--seed", str(seed)], capture_output=True, text=True)
    wall = time.time() - t0
    try:
        j = json.loads(r.stdout)
    except json.JSONDecodeError:
        return wall, {"error": r.stderr[-300:]}
    return wall, j


def background(kind, a):
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="1")
    if kind in ("eval_on_gpu1", "eval_on_gpu1_fresh"):
        loop = "while true; do %s eval --json --gpu 1 --task %s --candidate %s --seed 5 %s >/dev/null 2>&1; done" % (
            ANVIL, a.task, a.candidate, "--zygote none" if kind.endswith("fresh") else "")
        return [subprocess.Popen(["bash", "-c", loop], start_new_session=True)]
    if kind == "cpu_load":
        return [subprocess.Popen([sys.executable, "-c", BURN], start_new_session=True) for _ in range(a.cpu_procs)]
    if kind == "gpu1_kernels":
        return [subprocess.Popen([sys.executable, "-c", KERNELS], env=env, start_new_session=True)]
    if kind == "ctx_loop":
        return [subprocess.Popen([sys.executable, "-c", CTX], env=env, start_new_session=True)]
    if kind == "netns_loop":
        return [subprocess.Popen(["bash", "-c", NETNS], start_new_session=True)]
    if kind == "mntns_loop":
        return [subprocess.Popen(["bash", "-c", MNTNS], start_new_session=True)]
    if kind == "gpu1_driver":
        return [subprocess.Popen([sys.executable, "-c", DRIVER], env=env, start_new_session=True)]
    return []


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--task", required=True)
    ap.add_argument("--candidate", required=True)
    ap.add_argument("--runs", type=int, default=8)
    ap.add_argument("--cpu-procs", type=int, default=4)
    ap.add_argument("--conditions", default="alone,eval_on_gpu1,eval_on_gpu1_fresh,cpu_load,gpu1_kernels,gpu1_driver,ctx_loop,netns_loop,alone")
    ap.add_argument("--out")
    a = ap.parse_args()
    for g in (0, 1):  # builds, baselines and vetting cached on both GPUs' names before anything is timed
        w, j = one_eval(a, g, 1)
        print("warm-up on GPU %d: %.1f s, %s" % (g, w, j.get("outcome", j.get("error"))), file=sys.stderr)
    doc = {"fingerprint": fingerprint(), "task": a.task, "candidate": a.candidate, "runs": a.runs, "conditions": []}
    keys = ["seconds.total", "seconds.runner.import", "seconds.runner.verify", "seconds.runner.timing",
            "defenses.seconds.judge.waiting_for_candidate", "defenses.seconds.judge.candidate_batch",
            "defenses.seconds.candidate.@call", "defenses.seconds.candidate.@time",
            "defenses.seconds.candidate.setup", "timing.candidate_ms"]
    for cond in a.conditions.split(","):
        procs = background(cond, a)
        if procs:
            time.sleep(4.0)  # the load under way (the eval loop's first run, torch's import)
        s0, t0 = steal()
        walls, phases, outcomes = [], {}, []
        for i in range(a.runs):
            w, j = one_eval(a, 0, 100 + i)
            walls.append(w)
            outcomes.append(j.get("outcome", "error"))
            for k, v in flat(j).items():  # every clock's phases (judge, candidate, runner) and figures
                if k.startswith(PHASES) or k in keys:
                    phases.setdefault(k, []).append(v)
        s1, t1 = steal()
        ns = netns_ms()
        for p in procs:
            try:
                os.killpg(p.pid, 9)
            except ProcessLookupError:
                pass
            p.wait()
        row = {"condition": cond, "wall_median_s": round(statistics.median(walls), 3), "wall_min_s": round(min(walls), 3),
               "wall_max_s": round(max(walls), 3), "outcomes": sorted(set(outcomes)),
               "steal_share": round((s1 - s0) / max(1, t1 - t0), 4), "netns_ms": ns,
               "phases_median": {k: round(statistics.median(v), 4) for k, v in phases.items()}}
        doc["conditions"].append(row)
        print("%-14s wall %.2f s (min %.2f max %.2f) steal %.2f%% netns %.1f ms  waiting_for_candidate %s  "
              "runner.timing %s" % (
            cond, row["wall_median_s"], row["wall_min_s"], row["wall_max_s"], 100 * row["steal_share"], ns,
            row["phases_median"].get("defenses.seconds.judge.waiting_for_candidate"),
            row["phases_median"].get("seconds.runner.timing")), file=sys.stderr)
        time.sleep(1.0)
    text = json.dumps(doc, indent=1)
    print(text)
    if a.out:
        with open(a.out, "w") as fh:
            fh.write(text + "\n")


if __name__ == "__main__":
    main()
