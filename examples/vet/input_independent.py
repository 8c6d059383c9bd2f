# input_independent: DEGENERATE ON PURPOSE (anvil vet: input_independent). The input only
# contributes through a softmax over a dimension of size 1, which is always 1, so the output
# is tanh(weight) whatever x is: computing it once and replaying it passes (KernelBench L3 tasks
# that ignore their input fail the same way).
import torch
import torch.nn as nn

BATCH = 16
FEATURES = 64


class Model(nn.Module):
    def __init__(self, features):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(BATCH, features))

    def forward(self, x):
        gate = torch.softmax(x.sum(dim=-1, keepdim=True), dim=-1)  # (BATCH, 1): all ones
        return torch.tanh(self.weight) * gate


def get_inputs():
    return [torch.randn(BATCH, FEATURES)]


def get_init_inputs():
    return [FEATURES]
