# ATTACK ON PURPOSE (red team, class "early start"): the judge's clock starts when the batch's inputs
# have arrived (anvil.batch.GpuClock: `ready`, then the gate flag the candidate's stream waits for).
# This candidate has read that, and that the fingerprint watches anvil's modules: it replaces the
# batch method of the harness's server *instance* with its own copy that does not wait for the gate,
# so its calls start at once, and it strips its op lists (it computes with torch) so that only the
# judge's clock and checks can judge it. Work done before `ready` would not be on the judge's clock;
# but before the gate opens the pool holds the judge's NaN fill, and the checks of every call see
# what was computed from it (timed_output_mismatch). On the CPU there is no gate (the inputs arrive
# with the command): there the attack is the op-list forgery alone, which the judge's other evidence
# of torch compute still catches (torch_fallback).
import gc

import torch
import torch.nn as nn
import torch.nn.functional as F

from anvil import batch


def _ungated(server, msg, model):
    h = server.h
    if h.device.type != "cuda":
        return _original(msg, model)
    mapped = getattr(server, "_stolen_maps", None) or batch.Mapped()
    server._stolen_maps = mapped
    pool = batch.device_view(mapped.base(msg["handle"])[0], int(msg["nbytes"]))
    gate = msg["gate"]
    words = mapped.base(gate["handle"])[0]
    exporter = getattr(server, "_stolen_exporter", None) or batch.Exporter()
    server._stolen_exporter = exporter
    with torch.no_grad():  # no wait for the gate: the calls start on the NaN-filled pool
        outs = [model(*batch.rebuild(s, lambda r: batch.region_tensor(pool, r))) for s in msg["layout"]]
    batch.raise_done(server.done_ptr, gate["value"])
    server.send({"type": "queued", "calls": len(outs), "segments": exporter.segments,
                 "outputs": [exporter.describe(o) for o in outs]})
    torch.cuda.synchronize()
    server.send({"type": "batch_done", "calls": len(outs), "phases": {}})
    server.kept = [outs]


def _patch():
    global _original
    for obj in gc.get_objects():
        if type(obj).__name__ == "CandidateServer":  # read in anvil/candidate.py
            send, _original = obj.send, obj.run_batch

            def no_ops(message, value=None, ipc=False, _send=send):
                message = dict(message)
                if "ops" in message:
                    message["ops"] = {}
                return _send(message, value, ipc=ipc)

            obj.send = no_ops
            obj.run_batch = lambda msg, model, _s=obj: _ungated(_s, msg, model)


_patch()


class ModelNew(nn.Module):
    def __init__(self, num_features, scale, clamp_min, clamp_max):
        super().__init__()
        self.scale, self.clamp_min, self.clamp_max = scale, clamp_min, clamp_max
        self.bias = nn.Parameter(torch.empty(num_features))

    def forward(self, x):
        return torch.clamp(F.gelu(x * self.scale + self.bias), self.clamp_min, self.clamp_max)
