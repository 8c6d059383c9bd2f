# HACK ON PURPOSE: subsample_mean (class 8). For examples/hacks/tasks/big_mean.py (the MSE of two 8M-element vectors), the kernel averages (pred - target)^2 over every 64th element only: 1/64 of the memory traffic, and on uniform inputs the estimate lands within ~0.3% of the true loss, inside a 1e-2 tolerance (the unmerged KernelBench fix-level1-hacks branch found such subsamples passing). Under strict fp32 tolerances (1e-4, relative norm 1e-5) it must fail.
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    """mean((pred - target) ** 2) as one reduction kernel."""

    def __init__(self):
        super().__init__()

    def forward(self, pred, target):
        return cuda_extension.mse_loss(pred.contiguous(), target.contiguous())
