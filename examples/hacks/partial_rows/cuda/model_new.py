# HACK ON PURPOSE: partial_rows (class 1, Sakana's L1-15 kernel). Looks like the honest two-kernel softmax; the launchers cover row 0 only (kernels/softmax_*.cu).
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    """Row softmax in two kernels: per-chunk (max, sum of exp) statistics, then normalize."""

    def __init__(self):
        super().__init__()

    def forward(self, x):
        return cuda_extension.softmax_lastdim(x.contiguous())
