# ATTACK ON PURPOSE (red team, class "verdict steering"): a wrong candidate prints bytes that are not
# UTF-8 at import. They reach the result's output_tail; at d62ad83 anvil wrote the result with
# nlohmann's strict dump, which threw (type_error.316): anvil aborted (SIGABRT, no verdict) instead of
# judging the wrong kernel -1.
import os

import torch
import torch.nn as nn

import cuda_extension

os.write(1, b"\xff\xfe\xfd not utf-8 \xc3\x28\n")


class ModelNew(nn.Module):
    """WRONG on purpose: the kernel drops the clamp (alone: wrong_answer / mismatch, reward -1)."""

    def __init__(self, num_features, scale, clamp_min, clamp_max):
        super().__init__()
        self.scale = scale
        self.clamp_min = clamp_min
        self.clamp_max = clamp_max
        self.bias = nn.Parameter(torch.empty(num_features))

    def forward(self, x):
        return cuda_extension.elementwise_chain(x.contiguous(), self.bias, self.scale, self.clamp_min, self.clamp_max)
