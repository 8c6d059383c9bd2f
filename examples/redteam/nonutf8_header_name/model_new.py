# ATTACK ON PURPOSE (red team, class "verdict steering"): kernels/uses_header.cpp (written by the
# suite) includes a header whose file name is the bytes 0xFF 0xFE. At d62ad83 the build stored the
# depfile's names in its manifest with a strict JSON dump, which threw in a compile worker thread:
# std::terminate, no verdict. Such a name is now refused with the copy (load_error, -1).
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
