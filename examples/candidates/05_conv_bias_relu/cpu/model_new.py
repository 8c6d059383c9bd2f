import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    """relu(conv2d(x)): a direct C++ convolution on the CPU, bias and ReLU fused."""

    def __init__(self, in_channels, out_channels, kernel_size):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size, padding=kernel_size // 2)  # holds weight, bias

    def forward(self, x):
        return cuda_extension.conv2d_bias_relu(x.contiguous(), self.conv.weight, self.conv.bias, self.conv.padding[0])
