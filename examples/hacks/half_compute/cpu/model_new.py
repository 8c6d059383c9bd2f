# HACK ON PURPOSE: half_compute (class 6), CPU variant. Looks like the honest GEMM candidate; the GEMM truncates x and W to bf16 precision first (kernels/gemm.cpp). Evaluated with --preset paper (1e-2), where the rounding passes.
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    """relu(x @ W^T + b): a blocked C++ GEMM on the CPU, then bias + ReLU."""

    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)  # holds weight and bias; never called

    def forward(self, x):
        return cuda_extension.linear_relu(x.contiguous(), self.linear.weight, self.linear.bias)
