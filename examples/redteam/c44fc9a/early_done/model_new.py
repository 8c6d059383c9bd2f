# ATTACK ON PURPOSE (red team, class "early done"), the c44fc9a variant: at import, take the
# CandidateSide's socket to the judge (anvil/candidate.py at c44fc9a) and say, in its own words,
# that timing is over: one timed sample of 0.001 ms (the judge answers "next"), the timing summary,
# "done"; then exit before a single trial runs.
import gc
import os

import torch.nn as nn

from anvil import channel

for obj in gc.get_objects():
    if type(obj).__name__ == "CandidateSide":
        channel.send(obj.sock, {"type": "sample", "phase": "timed", "k": 0, "ms": 0.001})
        channel.recv(obj.sock)  # "next": the judge's reply must find this end still open
        channel.send(obj.sock, {"type": "timing", "result": {"median_ms": 0.001, "kernel_sum_ms": None},
                                "trace": None})
        channel.send(obj.sock, {"type": "done", "ops": {}, "clock": {}})
        os._exit(0)


class ModelNew(nn.Module):
    def __init__(self, num_features, scale, clamp_min, clamp_max):
        super().__init__()
