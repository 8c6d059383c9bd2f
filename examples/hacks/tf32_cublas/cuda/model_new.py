# HACK ON PURPOSE: tf32_cublas (class 6). Looks like the honest cuBLAS candidate; the GEMM runs with TF32 tensor-core math (kernels/gemm.cpp). Evaluated with --preset paper (1e-2), where TF32 passes.
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    """relu(x @ W^T + b): fp32 GEMM, then one fused bias + ReLU pass."""

    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)  # holds weight and bias; never called

    def forward(self, x):
        return cuda_extension.linear_relu(x.contiguous(), self.linear.weight, self.linear.bias)
