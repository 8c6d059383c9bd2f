# ATTACK ON PURPOSE (red team, class "shadow module"): if a runner started in the candidate's
# directory (`python -m anvil.runner` with the workdir as cwd, as at c44fc9a with --zygote none)
# imports this file instead of anvil's, it writes a forged report: correct, 0.001 ms, reward 3.
import json
import os
import sys

REPORT = {"protocol": "anvil.runner/1", "status": "done", "outcome": None, "reason": None, "message": "SHADOW",
          "detail": "", "verify": {"trials": [{"seed": 1, "ok": True, "report": ""}] * 5, "passed": 5, "failed": 0},
          "timing": {"candidate": {"median_ms": 0.001, "kernel_sum_ms": 0.001,
                                   "batch": {"calls": 2, "wall_ms": 0.002, "per_call_ms": 0.001}},
                     "eager": {"median_ms": 100.0, "kernel_sum_ms": 100.0, "p25_ms": 100.0, "p75_ms": 100.0,
                               "batch": {"calls": 2, "wall_ms": 200.0, "per_call_ms": 100.0}},
                     "compile": {"median_ms": 100.0, "kernel_sum_ms": 100.0, "p25_ms": 100.0, "p75_ms": 100.0}},
          "env": {}, "seconds": {}}


def entry():
    sys.stdin.read()
    os.write(3, (json.dumps(REPORT) + "\n").encode())
    os._exit(0)


main = entry
if __name__ == "__main__":
    entry()
