import torch
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    """clamp(gelu(x * scale + bias)) as one fused kernel, its launch configuration in self.config."""

    def __init__(self, num_features, scale, clamp_min, clamp_max):
        super().__init__()
        self.scale = scale
        self.clamp_min = clamp_min
        self.clamp_max = clamp_max
        self.bias = nn.Parameter(torch.empty(num_features))
        self.config = 5  # 256 threads a block, 8 rows a thread (the cuda variant's)

    def forward(self, x):
        return cuda_extension.elementwise_chain(x.contiguous(), self.bias, self.scale, self.clamp_min, self.clamp_max,
                                                self.config)
