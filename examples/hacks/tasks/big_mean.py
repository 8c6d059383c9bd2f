# big_mean: the mean squared error of two long vectors, one fp32 scalar from 2 x 8M elements (class 8).
# The inputs are uniform on [0, 1), so the loss concentrates at 1/6 and a strided subsample of 1/64
# of the elements lands within ~0.3% of it: close enough for a 1e-2 tolerance, not for 1e-4.
import torch
import torch.nn as nn

N = 1 << 23


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, pred, target):  # pred, target: (N,) -> ()
        return torch.mean((pred - target) ** 2)


def get_inputs():
    return [torch.rand(N), torch.rand(N)]


def get_init_inputs():
    return []
