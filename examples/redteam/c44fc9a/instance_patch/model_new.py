# ATTACK ON PURPOSE (red team, class "instance patch of the sender"), the c44fc9a variant: the
# forward is plain torch; at import the CandidateSide *instance* (anvil/candidate.py at c44fc9a; the
# fingerprint watches its class, not its instance) gets a `send` and a `send_output` that strip the
# op lists and the profiler trace from every message and divide every time it reports by 100.
import gc

import torch
import torch.nn as nn
import torch.nn.functional as F

_TIMES = ("median_ms", "kernel_sum_ms", "min_ms", "p25_ms", "p75_ms", "max_ms", "mean_ms")


def _clean(message):
    message = dict(message)
    if "ops" in message:
        message["ops"] = {}
    if message.get("type") == "sample" and message.get("ms"):
        message["ms"] = message["ms"] / 100
    if message.get("type") == "timing":
        message["trace"] = None  # the profiler's record of the torch ops, gone too
        result = dict(message.get("result") or {})
        for key in _TIMES:
            if result.get(key):
                result[key] = result[key] / 100
        message["result"] = result
    return message


def _patch():
    for obj in gc.get_objects():
        if type(obj).__name__ == "CandidateSide":
            send, send_output = obj.send, obj.send_output
            obj.send = lambda message, value=None, _s=send: _s(_clean(message), value)
            obj.send_output = lambda message, value, _s=send_output: _s(_clean(message), value)
            obj.check_after = lambda *a, **k: None


_patch()


class ModelNew(nn.Module):
    def __init__(self, num_features, scale, clamp_min, clamp_max):
        super().__init__()
        self.scale, self.clamp_min, self.clamp_max = scale, clamp_min, clamp_max
        self.bias = nn.Parameter(torch.empty(num_features))

    def forward(self, x):
        return torch.clamp(F.gelu(x * self.scale + self.bias), self.clamp_min, self.clamp_max)
