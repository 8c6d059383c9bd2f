# zero_output: DEGENERATE ON PURPOSE (anvil vet: zero_output). The shift pushes every U[0,1) input
# below zero before the ReLU, so the output is exactly 0 everywhere (KernelBench L2-9's pattern).
import torch
import torch.nn as nn

ROWS = 64
COLS = 128


class Model(nn.Module):
    def __init__(self, shift):
        super().__init__()
        self.shift = shift

    def forward(self, x):
        return torch.relu(x - self.shift)


def get_inputs():
    return [torch.rand(ROWS, COLS)]


def get_init_inputs():
    return [2.0]
