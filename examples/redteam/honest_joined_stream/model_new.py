# HONEST (red team's false-positive check): torch compute on a stream of its own, joined back to
# the caller's stream before forward returns, as torch's own ops do inside (cuDNN's grouped
# convolutions and LSTM ran on their own streams for KernelBench's L1 75 and L3 35, which anvil
# called side_stream, H100 2026-12-07). Under --protocol kernelbench this is ok: the call's stream
# waits for all of it, so nothing escapes the judge's clock.
import torch
import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def __init__(self, num_features, scale, clamp_min, clamp_max):
        super().__init__()
        self.scale, self.clamp_min, self.clamp_max = scale, clamp_min, clamp_max
        self.bias = nn.Parameter(torch.randn(num_features) * 0.5)

    def compute(self, x):
        return torch.clamp(F.gelu(x * self.scale + self.bias), self.clamp_min, self.clamp_max)

    def forward(self, x):
        if not x.is_cuda:
            return self.compute(x)
        caller = torch.cuda.current_stream()
        side = torch.cuda.Stream()
        side.wait_stream(caller)  # the inputs are ready on the caller's stream
        with torch.cuda.stream(side):
            y = self.compute(x)
        caller.wait_stream(side)  # joined: the caller's stream waits for all of it
        y.record_stream(caller)
        return y
