# HONEST (red team's false-positive check): a LayerNorm whose ModelNew takes an extra eps with a
# default beside Model(normalized_shape), as public KernelBench generations do. KernelBench builds
# ModelNew(*get_init_inputs()); anvil at d62ad83 refused it as a different signature (load_error).
import torch
import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def __init__(self, normalized_shape: tuple, eps: float = 1e-05):
        super().__init__()
        self.normalized_shape = tuple(normalized_shape)
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(self.normalized_shape))
        self.bias = nn.Parameter(torch.zeros(self.normalized_shape))

    def forward(self, x):
        return F.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)
