"""anvil synth's GPU stage on tasks that fail its processes, on the GPU host: one that ends its process
(os._exit), one that hangs past the task timeout, and healthy ones around them. Every task must get its
verdict (the 2026-12-02 CI failure: a task that ended its process got none, and neither did the tasks
after it). python3 bench/gpu_stage_faults.py OUT_DIR [--device cuda|cpu] [--size N] (the tasks' N x N weight,
a 2N x N input: 4096 on the GPU, about 6 ms); exit 0 when every verdict is the expected one."""
import json
import os
import subprocess
import sys
import time

TASK = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
{init}        self.w = nn.Parameter(torch.randn({n}, {n}) / 64)

    def forward(self, x):
        return torch.tanh(x @ self.w)


def get_inputs():
    return [torch.randn({m}, {n})]


def get_init_inputs():
    return []
'''
FAULTS = {0: "", 1: "        import os; os._exit(7)\n", 2: "", 3: "        import time; time.sleep(600)\n", 4: "",
          5: "        import os; os._exit(9)\n", 6: ""}
EXPECT = {1: ("gpu_error", "exit code 7"), 3: ("gpu_timeout", "killed"), 5: ("gpu_error", "exit code 9")}


def main(argv):
    out = argv[0]
    device = argv[argv.index("--device") + 1] if "--device" in argv else "cuda"
    n = int(argv[argv.index("--size") + 1]) if "--size" in argv else 4096
    os.makedirs(out, exist_ok=True)
    rows = os.path.join(out, "rows.jsonl")
    with open(rows, "w") as f:
        for i, init in FAULTS.items():
            f.write(json.dumps({"index": i, "ops": ["torch.matmul", "torch.tanh"], "code": TASK.format(init=init, n=n, m=2 * n),
                                "estimate_ms": 8.0}) + "\n")
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, "-m", "anvil.synth.gpu_stage", rows, "--out", out, "--device", device,
                        "--procs", "3", "--task-timeout", "30"], capture_output=True, text=True, timeout=600)
    print(r.stdout[-2000:], r.stderr[-2000:] if r.returncode else "", sep="")
    got = {x["index"]: x for x in map(json.loads, open(os.path.join(out, "gpu.jsonl")))}
    ok = r.returncode == 0 and sorted(got) == sorted(FAULTS)
    for i in FAULTS:
        rec = got.get(i)
        want = EXPECT.get(i)
        fine = rec is not None and (rec["reason"] == want[0] and want[1] in rec["detail"] if want
                                    else rec["status"] == "accepted" or rec["reason"] == "gpu_runtime")
        ok = ok and fine
        print("task %d: %s %s %s -> %s" % (i, rec and rec["status"], rec and rec["reason"],
                                          rec and rec.get("detail", "")[:80], "as expected" if fine else "WRONG"))
    print("%d tasks, %d verdicts in %.0f s: %s" % (len(FAULTS), len(got), time.monotonic() - t0, "ok" if ok else "FAILED"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
