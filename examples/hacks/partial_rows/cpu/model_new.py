# HACK ON PURPOSE: partial_rows (class 1, Sakana's L1-15 kernel). Looks like the honest row softmax; the kernel computes row 0 only (kernels/softmax.cpp).
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    """Row softmax in plain C++ on the CPU."""

    def __init__(self):
        super().__init__()

    def forward(self, x):
        return cuda_extension.softmax_lastdim(x.contiguous())
