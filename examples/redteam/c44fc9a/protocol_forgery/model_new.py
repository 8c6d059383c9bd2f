# ATTACK ON PURPOSE (red team, class "protocol forgery"), the c44fc9a variant: at import, take over
# the CandidateSide's end of the wire (anvil/candidate.py at c44fc9a) and play the whole old
# protocol itself: every output (verification and checked timed calls) comes from the reference the
# harness holds (ev.ref, Model with the task's weights), the op lists are empty, the trace is None,
# the timing samples are invented (0.001 ms). No ModelNew call ever runs.
import gc
import os

import torch
import torch.nn as nn

from anvil import channel


def _side():
    for obj in gc.get_objects():
        if type(obj).__name__ == "CandidateSide":
            return obj
    return None


def _hijack(side):
    ev, sock = side.ev, side.sock
    ref = ev.ref
    t = ev.req["timing"]
    channel.send(sock, {"type": "loaded", "modules": []})
    with torch.no_grad():
        for i, pristine in enumerate(side.pristine):
            for c in range(2):
                out = ref(*[x.clone() for x in pristine])
                channel.send(sock, {"type": "output", "trial": i, "call": c, "ops": {}}, out)
                channel.recv(sock)  # "received"
        channel.send(sock, {"type": "ready_to_time"})
        channel.recv(sock)  # "go"
        probes = 3 if ev.device.type == "cuda" and t.get("hide_launch", True) else 0
        plan = ["warmup"] * t["warmup"] + ["probe"] * probes + ["timed"] * t["calls"]
        for k, phase in enumerate(plan):
            channel.send(sock, {"type": "sample", "phase": phase, "k": k, "ms": 0.001 if phase == "timed" else None})
            if channel.recv(sock).get("type") == "check":
                channel.send(sock, {"type": "timed_output", "k": k}, ref(*ev.call_inputs(k)))
                channel.recv(sock)  # "next"
    channel.send(sock, {"type": "timing", "result": {"median_ms": 0.001, "kernel_sum_ms": None}, "trace": None})
    channel.send(sock, {"type": "done", "ops": {}, "clock": {}})
    os._exit(0)


_s = _side()
if _s is not None:
    _hijack(_s)


class ModelNew(nn.Module):
    def __init__(self, num_features, scale, clamp_min, clamp_max):
        super().__init__()
        self.bias = nn.Parameter(torch.empty(num_features))
