import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    """Row softmax in two kernels: per-chunk (max, sum of exp) statistics, then normalize."""

    def __init__(self):
        super().__init__()

    def forward(self, x):
        return cuda_extension.softmax_lastdim(x.contiguous())
