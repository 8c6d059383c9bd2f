# constant_output: DEGENERATE ON PURPOSE (anvil vet: constant_output). Global average pooling
# broadcast back to the input's shape: every element of the output is the same number, so
# computing one mean and filling the output passes.
import torch
import torch.nn as nn

BATCH = 8
CHANNELS = 16
SIZE = 16


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return x.mean().expand_as(x).contiguous()


def get_inputs():
    return [torch.rand(BATCH, CHANNELS, SIZE, SIZE)]


def get_init_inputs():
    return []
