# tiny_output: DEGENERATE ON PURPOSE (anvil vet: tiny_output). The mean of a layer-normalized row
# is zero up to rounding (~1e-8), far below fp32's atol (Sakana's "38x" on KernelBench L2-23 was
# GroupNorm followed by a mean).
import torch
import torch.nn as nn

BATCH = 32
FEATURES = 256


class Model(nn.Module):
    def __init__(self, features):
        super().__init__()
        self.linear = nn.Linear(features, features)
        self.norm = nn.LayerNorm(features, elementwise_affine=False)

    def forward(self, x):
        return self.norm(self.linear(x)).mean(dim=-1)


def get_inputs():
    return [torch.randn(BATCH, FEATURES)]


def get_init_inputs():
    return [FEATURES]
