# small_chain: y = clamp(gelu(x * scale + bias), clamp_min, clamp_max) on a (512, 1024) input: the
# red-team suite's task (examples/redteam), small enough that every attack runs in seconds on a CPU.
import torch
import torch.nn as nn
import torch.nn.functional as F

ROWS = 512
COLS = 1024


class Model(nn.Module):
    def __init__(self, num_features, scale, clamp_min, clamp_max):
        super().__init__()
        self.scale = scale
        self.clamp_min = clamp_min
        self.clamp_max = clamp_max
        self.bias = nn.Parameter(torch.randn(num_features) * 0.5)

    def forward(self, x):
        return torch.clamp(F.gelu(x * self.scale + self.bias), self.clamp_min, self.clamp_max)


def get_inputs():
    return [torch.randn(ROWS, COLS)]


def get_init_inputs():
    return [COLS, 1.5, -0.1, 2.0]
