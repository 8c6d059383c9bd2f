import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    """Row softmax in plain C++ on the CPU."""

    def __init__(self):
        super().__init__()

    def forward(self, x):
        return cuda_extension.softmax_lastdim(x.contiguous())
