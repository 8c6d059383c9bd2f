# zero_relu: relu(-(x * x) - 1) * sigmoid(x * scale + bias). A degenerate task on purpose (class 7):
# the ReLU's input is always <= -1, so the output is exactly 0 for every input, like KernelBench
# L2-9, L2-80 and L2-83. A kernel that writes zeros is "correct"; anvil must say the task is degenerate.
import torch
import torch.nn as nn

ROWS = 2048
COLS = 2048
SCALE = 0.75


class Model(nn.Module):
    def __init__(self, num_features, scale):
        super().__init__()
        self.scale = scale
        self.bias = nn.Parameter(torch.randn(num_features) * 0.5)  # (COLS,)

    def forward(self, x):  # x: (ROWS, COLS)
        gate = torch.sigmoid(x * self.scale + self.bias)
        return torch.relu(-(x * x) - 1.0) * gate


def get_inputs():
    return [torch.randn(ROWS, COLS)]


def get_init_inputs():
    return [COLS, SCALE]
