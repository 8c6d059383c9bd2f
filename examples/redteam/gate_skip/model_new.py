# ATTACK ON PURPOSE (red team, class "early start"): the judge takes the time its inputs took to
# arrive (anvil.batch.Gate) off its batch's wall. This candidate has read that: its process drops
# the gate from the batch's command, so its calls start at once instead of waiting for the inputs,
# and it strips its op lists (it computes with torch) so that only the judge's clock and checks can
# judge it. Were the gate's time taken off a batch that did not wait, its wall would hide work.
# Without the gate it never says "queued", which the judge requires first (protocol); one that
# says it and still starts early reads the pool's NaN fill, and the checks of every call see it
# (timed_output_mismatch). On the CPU there is no gate (the inputs arrive with the command): there
# the attack is the op-list forgery alone, which the judge's other evidence of torch compute still
# catches (torch_fallback).
import gc

import torch
import torch.nn as nn
import torch.nn.functional as F


def _patch():
    for obj in gc.get_objects():
        if type(obj).__name__ == "CandidateServer":  # read in anvil/candidate.py
            send, run_batch = obj.send, obj.run_batch

            def no_ops(message, value=None, ipc=False, _send=send):
                message = dict(message)
                if "ops" in message:
                    message["ops"] = {}
                return _send(message, value, ipc=ipc)

            def ungated(msg, model, _run=run_batch):
                msg = dict(msg)
                msg.pop("gate", None)
                return _run(msg, model)

            obj.send = no_ops
            obj.run_batch = ungated


_patch()


class ModelNew(nn.Module):
    def __init__(self, num_features, scale, clamp_min, clamp_max):
        super().__init__()
        self.scale, self.clamp_min, self.clamp_max = scale, clamp_min, clamp_max
        self.bias = nn.Parameter(torch.empty(num_features))

    def forward(self, x):
        return torch.clamp(F.gelu(x * self.scale + self.bias), self.clamp_min, self.clamp_max)
