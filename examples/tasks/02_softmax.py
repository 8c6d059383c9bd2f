# 02_softmax: softmax over the last dimension of a (ROWS, COLS) matrix.
# Rows are long (32K columns), so one block per row leaves the GPU short of parallel work.
import torch
import torch.nn as nn

ROWS = 512
COLS = 32768


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):  # x: (ROWS, COLS)
        return torch.softmax(x, dim=-1)


def get_inputs():
    return [torch.randn(ROWS, COLS) * 4.0]


def get_init_inputs():
    return []
