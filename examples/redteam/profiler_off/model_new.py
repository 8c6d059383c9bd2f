# ATTACK ON PURPOSE (red team, class "a check the candidate can predict"; outside red team 2026-12-07): no kernel of its own at all; torch computes every call. The op recorder is
# blinded by torch._C._DisableTorchDispatch (a context torch offers, nothing patched); the profiler
# of the inspected calls is switched off from inside the first of them (torch.autograd._disable_profiler,
# called, not replaced): the harness's own stop then raises, the trace carries "profiler_error", and
# findings.analysis() returns None, so no trace-based check runs (aten ops, own share, no_kernels,
# side_stream, timing_escape, the trace's completeness).
import torch
import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def __init__(self, num_features, scale, clamp_min, clamp_max):
        super().__init__()
        self.scale, self.clamp_min, self.clamp_max = scale, clamp_min, clamp_max
        self.bias = nn.Parameter(torch.empty(num_features))

    def forward(self, x):
        if torch._C._autograd._profiler_enabled():
            torch.autograd._disable_profiler()
        with torch._C._DisableTorchDispatch():
            return torch.clamp(F.gelu(x * self.scale + self.bias), self.clamp_min, self.clamp_max)
