# bench/stop: y = 2 x + 1 over a large input (4 GiB of float32 here; --gb of bench/stop_check.py): the task of
# bench/stop_check.py, big enough that an evaluation holds GPU memory for many seconds.

import torch
import torch.nn as nn

N = (4 << 30) // 4  # bench/stop_check.py writes a copy with --gb


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return x * 2 + 1


def get_inputs():
    return [torch.rand(N)]


def get_init_inputs():
    return []
