import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    """LayerNorm in one pass over HBM: each row is held in registers."""

    def __init__(self, hidden, eps):
        super().__init__()
        self.norm = nn.LayerNorm(hidden, eps=eps)  # holds weight and bias; never called

    def forward(self, x):
        return cuda_extension.layer_norm(x.contiguous(), self.norm.weight, self.norm.bias, self.norm.eps)
