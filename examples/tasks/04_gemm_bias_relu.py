# 04_gemm_bias_relu: relu(x @ W^T + b), an nn.Linear followed by ReLU, in fp32.
import torch
import torch.nn as nn

BATCH = 1024
IN_FEATURES = 1024
OUT_FEATURES = 1024


class Model(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):  # x: (BATCH, IN_FEATURES) -> (BATCH, OUT_FEATURES)
        return torch.relu(self.linear(x))


def get_inputs():
    return [torch.randn(BATCH, IN_FEATURES)]


def get_init_inputs():
    return [IN_FEATURES, OUT_FEATURES]
