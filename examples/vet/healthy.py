# healthy: a task anvil vet passes. A linear layer and GELU on signed inputs: the output varies
# with the input, is far above the tolerance, and equals no input.
import torch
import torch.nn as nn

BATCH = 32
IN_FEATURES = 64
OUT_FEATURES = 48


class Model(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        return torch.nn.functional.gelu(self.linear(x))


def get_inputs():
    return [torch.randn(BATCH, IN_FEATURES)]


def get_init_inputs():
    return [IN_FEATURES, OUT_FEATURES]
