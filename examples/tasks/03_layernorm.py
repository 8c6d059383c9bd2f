# 03_layernorm: nn.LayerNorm over the last dimension, with an elementwise affine transform.
import torch
import torch.nn as nn

BATCH = 16
SEQ = 512
HIDDEN = 2048
EPS = 1e-5


class Model(nn.Module):
    def __init__(self, hidden, eps):
        super().__init__()
        self.norm = nn.LayerNorm(hidden, eps=eps)
        # Move the affine parameters away from their (1, 0) defaults so that a kernel that
        # ignores them is caught.
        with torch.no_grad():
            self.norm.weight.normal_(1.0, 0.2)
            self.norm.bias.normal_(0.0, 0.2)

    def forward(self, x):  # x: (BATCH, SEQ, HIDDEN)
        return self.norm(x)


def get_inputs():
    return [torch.randn(BATCH, SEQ, HIDDEN) * 2.0 + 0.5]


def get_init_inputs():
    return [HIDDEN, EPS]
