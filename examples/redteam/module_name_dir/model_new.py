# ATTACK ON PURPOSE (red team, class "verdict steering"): a directory named cuda_extension.so (the
# suite writes it: git ignores the name) where anvil writes the built module. At d62ad83 the copy
# took the directory and the module could not be written: "could not evaluate (environment error)",
# exit 2, instead of judging the wrong kernel -1.
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
