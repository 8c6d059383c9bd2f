# ATTACK ON PURPOSE (red team, class "early done"): the judge's clock of a batch ends on the judge's
# own stream, once the candidate's stream has raised the batch's done flag and the judge has read its
# outputs (anvil.batch.GpuClock). This candidate has read that, and that the fingerprint watches
# anvil's modules: it replaces the batch method of the harness's server *instance* with its own copy
# whose stream raises the done flag as soon as the gate opens, before any of its calls run, so that
# the judge's clock would end at once; and it strips its op lists (it computes with torch) so that
# only the judge's clock and checks can judge it. Either the judge reads outputs that are not
# written yet, and the checks of the calls see it (timed_output_mismatch), or the GPU ran the
# candidate's calls before the judge's read (the two processes' contexts take turns), and then the
# judge's clock counted them: nothing gained, and what is left is its forward's torch compute, which
# the profiler's trace of its timed calls shows (torch_fallback; seen on the H100, 2026-11-25). On
# the CPU there is no done flag: there the attack is the op-list forgery alone, caught as
# torch_fallback.
import gc

import torch
import torch.nn as nn
import torch.nn.functional as F

from anvil import batch


def _done_first(server, msg, model):
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
    batch.wait_for_gate(words, gate["value"])
    batch.raise_done(server.done_ptr, gate["value"])  # done, before a single call ran
    with torch.no_grad():
        outs = [model(*batch.rebuild(s, lambda r: batch.region_tensor(pool, r))) for s in msg["layout"]]
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
            obj.run_batch = lambda msg, model, _s=obj: _done_first(_s, msg, model)


_patch()


class ModelNew(nn.Module):
    def __init__(self, num_features, scale, clamp_min, clamp_max):
        super().__init__()
        self.scale, self.clamp_min, self.clamp_max = scale, clamp_min, clamp_max
        self.bias = nn.Parameter(torch.empty(num_features))

    def forward(self, x):
        for _ in range(8):  # longer calls: the judge's read comes while they run
            y = torch.clamp(F.gelu(x * self.scale + self.bias), self.clamp_min, self.clamp_max)
        return y
