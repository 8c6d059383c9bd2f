# bench/stop: the mean of each row of a large input (4 GiB of float32 here; --gb of
# bench/stop_check.py): the task of bench/stop_check.py, big enough that an evaluation holds GPU
# memory for many seconds, with an output of one value per row, so that a defended evaluation
# (lean: about two sets of inputs at a time across its two processes) of 30 GiB fits an 80 GB GPU.

import torch
import torch.nn as nn

ROWS = 4096
N = (4 << 30) // 4  # bench/stop_check.py writes a copy with --gb


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return x.mean(dim=1)


def get_inputs():
    return [torch.rand(ROWS, N // ROWS)]


def get_init_inputs():
    return []
