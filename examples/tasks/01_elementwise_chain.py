# 01_elementwise_chain: y = clamp(gelu(x * scale + bias), clamp_min, clamp_max).
# Four memory-bound ops in eager mode (mul, add, gelu, clamp); one fused kernel needs a single pass.
import torch
import torch.nn as nn
import torch.nn.functional as F

ROWS = 4096
COLS = 4096
SCALE = 1.5
CLAMP_MIN = -0.1
CLAMP_MAX = 2.0


class Model(nn.Module):
    def __init__(self, num_features, scale, clamp_min, clamp_max):
        super().__init__()
        self.scale = scale
        self.clamp_min = clamp_min
        self.clamp_max = clamp_max
        self.bias = nn.Parameter(torch.randn(num_features) * 0.5)  # (COLS,)

    def forward(self, x):  # x: (ROWS, COLS)
        x = x * self.scale + self.bias
        x = F.gelu(x)
        return torch.clamp(x, self.clamp_min, self.clamp_max)


def get_inputs():
    return [torch.randn(ROWS, COLS)]


def get_init_inputs():
    return [COLS, SCALE, CLAMP_MIN, CLAMP_MAX]
