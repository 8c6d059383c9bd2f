# HACK ON PURPOSE: replay_first (class 7/9). forward computes the right answer on its first call only and returns that same tensor on every later call, whatever the input. It passes a judge whose task output barely depends on the input (constant or degenerate tasks, class 7) or that checks one input set and then times others (class 9: weak fuzzing), and its timed calls cost nothing.
import torch
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    """clamp(gelu(x * scale + bias)) as one fused kernel, computed once."""

    def __init__(self, num_features, scale, clamp_min, clamp_max):
        super().__init__()
        self.scale = scale
        self.clamp_min = clamp_min
        self.clamp_max = clamp_max
        self.bias = nn.Parameter(torch.empty(num_features))
        self._first = None

    def forward(self, x):
        if self._first is None:
            self._first = cuda_extension.elementwise_chain(x.contiguous(), self.bias, self.scale, self.clamp_min,
                                                           self.clamp_max)
        return self._first
