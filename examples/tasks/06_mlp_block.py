# 06_mlp_block: a pre-norm transformer MLP block, x + fc2(gelu(fc1(layer_norm(x)))), in fp32.
import torch
import torch.nn as nn
import torch.nn.functional as F

BATCH = 512
HIDDEN = 512
FFN = 2048


class Model(nn.Module):
    def __init__(self, hidden, ffn):
        super().__init__()
        self.norm = nn.LayerNorm(hidden)
        self.fc1 = nn.Linear(hidden, ffn)
        self.fc2 = nn.Linear(ffn, hidden)
        with torch.no_grad():  # non-trivial affine parameters, so a kernel that drops them is caught
            self.norm.weight.normal_(1.0, 0.2)
            self.norm.bias.normal_(0.0, 0.2)

    def forward(self, x):  # x: (BATCH, HIDDEN)
        h = self.fc1(self.norm(x))  # (BATCH, FFN)
        h = F.gelu(h)
        return x + self.fc2(h)  # (BATCH, HIDDEN)


def get_inputs():
    return [torch.randn(BATCH, HIDDEN)]


def get_init_inputs():
    return [HIDDEN, FFN]
