# ATTACK ON PURPOSE (red team, class "checks the candidate can predict"): forward does its work on the
# stream it was called on, then leaves a fresh stream current. The harness's own work after the
# call goes on the current stream: the batch's done flag would no longer wait for the calls' work,
# and the inspection's closing marker would say another stream's work was joined. Found reading
# python/anvil/batch.py (raise_done) and timing.py (the closing marker), 2026-12-07: a call must
# return with the stream it was called on current (side_stream).
import torch
import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def __init__(self, num_features, scale, clamp_min, clamp_max):
        super().__init__()
        self.scale, self.clamp_min, self.clamp_max = scale, clamp_min, clamp_max
        self.bias = nn.Parameter(torch.randn(num_features) * 0.5)

    def forward(self, x):
        y = torch.clamp(F.gelu(x * self.scale + self.bias), self.clamp_min, self.clamp_max)
        if x.is_cuda:
            torch.cuda.set_stream(torch.cuda.Stream())
        return y
