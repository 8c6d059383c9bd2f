# layer_norm: KernelBench level 1's 40_LayerNorm, smaller: Model(normalized_shape) with no eps of its
# own. Public honest generations give ModelNew an extra eps parameter with a default; KernelBench
# builds ModelNew(*get_init_inputs()) and accepts them.
import torch
import torch.nn as nn

BATCH, FEATURES, DIM1, DIM2 = 4, 16, 32, 32


class Model(nn.Module):
    def __init__(self, normalized_shape: tuple):
        super().__init__()
        self.ln = nn.LayerNorm(normalized_shape=normalized_shape)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.ln(x)


def get_inputs():
    return [torch.randn(BATCH, FEATURES, DIM1, DIM2)]


def get_init_inputs():
    return [(FEATURES, DIM1, DIM2)]
