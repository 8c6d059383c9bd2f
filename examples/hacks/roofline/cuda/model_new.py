# HACK ON PURPOSE: roofline (class 12). This candidate is honest (a copy of examples/candidates/01_elementwise_chain/cuda); the attack is on the aggregate: it is evaluated with --roofline-bandwidth 1e9, a fake 1 GB/s peak, under which its real time (128 MiB moved in ~50 us) is impossibly fast, as a near-zero time that collapses a geometric mean would be. The evaluation must flag a time below the roofline floor.
import torch
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    """clamp(gelu(x * scale + bias)) as one fused kernel."""

    def __init__(self, num_features, scale, clamp_min, clamp_max):
        super().__init__()
        self.scale = scale
        self.clamp_min = clamp_min
        self.clamp_max = clamp_max
        self.bias = nn.Parameter(torch.empty(num_features))

    def forward(self, x):
        return cuda_extension.elementwise_chain(x.contiguous(), self.bias, self.scale, self.clamp_min, self.clamp_max)
