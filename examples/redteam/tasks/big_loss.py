# big_loss: KernelBench level 1's 94_MSELoss (its get_inputs() as it is: predictions scaled by a random
# factor, targets uniform) at 2^20 elements a tensor, small enough for a CPU: the task of the
# red team's loss shortcuts (a strided subsample, a closed-form expectation), which pass KernelBench's
# own harness on the full-size problem.
import torch
import torch.nn as nn

N = 1 << 20


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, predictions, targets):
        return torch.mean((predictions - targets) ** 2)


def get_inputs():
    scale = torch.rand(())
    return [torch.rand(N) * scale, torch.rand(N)]


def get_init_inputs():
    return []
