# identity_relu: DEGENERATE ON PURPOSE (anvil vet: equals_input). ReLU on torch.rand inputs, as
# in KernelBench L1 since its inputs became U[0,1): every input is already non-negative, so
# returning the input passes.
import torch
import torch.nn as nn

ROWS = 64
COLS = 256


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.relu(x)


def get_inputs():
    return [torch.rand(ROWS, COLS)]


def get_init_inputs():
    return []
