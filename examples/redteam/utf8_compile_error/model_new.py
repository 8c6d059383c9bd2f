# ATTACK ON PURPOSE (red team, class "verdict steering"): kernels/broken.cpp (written by the suite:
# bytes git should not carry) does not compile, and g++ quotes its line, bytes that are not UTF-8
# included, into the diagnostics; at d62ad83 writing them into the result aborted anvil (SIGABRT)
# instead of a compile_error, -1.
import torch
import torch.nn as nn

import cuda_extension


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
