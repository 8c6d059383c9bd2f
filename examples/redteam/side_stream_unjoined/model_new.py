# ATTACK ON PURPOSE (red team, class "checks the candidate can predict"): the same torch compute as
# honest_joined_stream, on a stream of its own that the caller's stream never waits for. Under
# --protocol kernelbench, where joined work of another stream is allowed (torch's own ops use such
# streams), work still running when the call's stream is done must be caught: its outputs are read
# before they are written (timed_output_mismatch, unwritten_output), or the trace shows the other
# stream's work running past the call's closing marker (side_stream).
import torch
import torch.nn as nn
import torch.nn.functional as F

_side = {}


class ModelNew(nn.Module):
    def __init__(self, num_features, scale, clamp_min, clamp_max):
        super().__init__()
        self.scale, self.clamp_min, self.clamp_max = scale, clamp_min, clamp_max
        self.bias = nn.Parameter(torch.randn(num_features) * 0.5)

    def forward(self, x):
        if not x.is_cuda:
            return torch.clamp(F.gelu(x * self.scale + self.bias), self.clamp_min, self.clamp_max)
        side = _side.setdefault(x.device, torch.cuda.Stream())
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            torch.cuda._sleep(200_000)  # about 0.1 ms of the other stream's time, past the call's end
            y = torch.clamp(F.gelu(x * self.scale + self.bias), self.clamp_min, self.clamp_max)
        return y  # never joined
