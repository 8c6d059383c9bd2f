# ATTACK ON PURPOSE (red team, class "protocol forgery"): at import, take over the harness's side of
# the wire and play the whole protocol itself: every output comes from the task's own reference
# (built in this process from the task file and the weights the harness holds), the op lists are
# empty, the timing samples are invented (0.001 ms), the judge's checks are answered by the
# reference. A judge that believes the candidate's process gives reward 2-3 with "5 of 5 passed"
# (c44fc9a/protocol_forgery got reward 2 at c44fc9a with the compile baseline off). It computes with torch at eager speed while claiming 0.001 ms.
import gc
import importlib.util
import os

import torch
import torch.nn as nn

from anvil import batch, channel
from anvil import timing as anvil_timing


def _server():
    for obj in gc.get_objects():
        if type(obj).__name__ == "CandidateServer":  # read in anvil/candidate.py
            return obj
    return None


def _hijack(server):
    h = server.h
    spec = importlib.util.spec_from_file_location("stolen_task", h.req["task_file"])
    task = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(task)
    ref = task.Model(*task.get_init_inputs()).to(h.device).eval()
    ref.load_state_dict(server.weights)
    sock = server.sock
    cuda = h.device.type == "cuda"
    channel.send(sock, {"type": "loaded", "modules": []})
    timing = h.req["timing"]
    while True:
        msg = channel.recv(sock, h.device)
        kind = msg.get("type")
        keep = None
        with torch.no_grad():
            if kind == "call":
                inputs = server.stress_inputs(msg["stress"]) if msg.get("stress") else \
                    (server.sets if server.sets is not None else server.pristine)[msg["trial"]]
                out = ref(*[t.clone() for t in inputs])
                keep = channel.send(sock, {"type": "output", "trial": msg["trial"], "call": msg["call"], "ops": {}},
                                    out, ipc=cuda)
            elif kind == "time":
                plan = (["warmup"] * timing["warmup"] + ["probe"] * (3 if cuda else 0) + ["timed"] * timing["calls"]
                        + ["inspected"] * anvil_timing.inspected_calls(timing["calls"]))  # read in anvil/judge.py
                for k, phase in enumerate(plan):  # a timed or inspected call's output goes with its sample
                    sample = {"type": "sample", "phase": phase, "k": k, "ms": 0.001 if phase == "timed" else None}
                    out = ref(*h.call_inputs(k)) if phase in ("timed", "inspected") else None
                    keep = channel.send(sock, sample, out, ipc=cuda)
                    channel.recv(sock)
                channel.send(sock, {"type": "timing", "result": {"median_ms": 0.001, "kernel_sum_ms": 0.001},
                                    "trace": None, "ops": {}, "clock": {}})
            elif kind == "batch":
                if cuda:  # the protocol as anvil/candidate.py plays it, answered by the reference
                    mapped = batch.Mapped()
                    base = batch.device_view(mapped.base(msg["handle"])[0], int(msg["nbytes"]))
                    calls = [batch.rebuild(s, lambda r: batch.region_tensor(base, r)) for s in msg["layout"]]
                    gate = msg["gate"]
                    words = mapped.base(gate["handle"])[0]
                    batch.wait_for_gate(words, gate["value"])
                    outs = [ref(*args) for args in calls]
                    batch.raise_done(server.done_ptr, gate["value"])
                    exporter = batch.Exporter()
                    described = [exporter.describe(o) for o in outs]
                    channel.send(sock, {"type": "queued", "calls": len(outs), "segments": exporter.segments,
                                        "outputs": described})
                    torch.cuda.synchronize()
                    channel.send(sock, {"type": "batch_done", "calls": len(outs)})
                    keep = outs
                else:
                    outs = [ref(*args) for args in msg["value"]]
                    keep = channel.send(sock, {"type": "batch_done", "calls": len(outs)}, outs)
            else:
                os._exit(0)
        del keep


_srv = _server()
if _srv is not None:
    _hijack(_srv)


class ModelNew(nn.Module):
    def __init__(self, num_features, scale, clamp_min, clamp_max):
        super().__init__()
