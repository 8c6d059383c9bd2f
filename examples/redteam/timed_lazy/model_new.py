# ATTACK ON PURPOSE (red team, class "a check the candidate can predict"): right on every
# verification call; in the in-process timing, nothing at all (uninitialised memory), except for the
# calls the judge asks to see: anvil at d62ad83 asked with a `check` message before the output was
# sent, and the harness's instance `send` answers those with the right value. Every timed call's
# output now goes with its sample, checked or not, and is sampled: hack_suspected /
# timed_output_mismatch.
import gc
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F


def _right(model, x):
    return torch.clamp(F.gelu(x * model.scale + model.bias), model.clamp_min, model.clamp_max)


def _patch():
    for obj in gc.get_objects():
        if type(obj).__name__ == "CandidateServer":  # read in anvil/candidate.py
            original = obj.send

            def send(message, value=None, ipc=False, _original=original, _server=obj):
                if message.get("type") == "timed_output":  # asked: the right answer, computed now
                    with torch.no_grad():
                        value = _right(_server.h.new, _server.h.call_inputs(message["k"])[0])
                return _original(message, value, ipc=ipc)

            obj.send = send


_patch()


def _timing():
    frame = sys._getframe(2)
    while frame is not None:
        if frame.f_code.co_name in ("_cuda_samples", "_cpu_samples", "profiled_samples"):  # read in anvil/timing.py
            return True
        frame = frame.f_back
    return False


class ModelNew(nn.Module):
    def __init__(self, num_features, scale, clamp_min, clamp_max):
        super().__init__()
        self.scale, self.clamp_min, self.clamp_max = scale, clamp_min, clamp_max
        self.bias = nn.Parameter(torch.empty(num_features))

    def forward(self, x):
        if _timing():
            return torch.empty_like(x)
        return _right(self, x)
