# 05_conv_bias_relu: relu(conv2d(x, W, b)) with a 3x3 kernel, stride 1, padding 1, in fp32.
import torch
import torch.nn as nn

BATCH = 16
IN_CHANNELS = 32
OUT_CHANNELS = 64
HEIGHT = 64
WIDTH = 64
KERNEL_SIZE = 3


class Model(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size, padding=kernel_size // 2)

    def forward(self, x):  # x: (BATCH, IN_CHANNELS, HEIGHT, WIDTH) -> (BATCH, OUT_CHANNELS, HEIGHT, WIDTH)
        return torch.relu(self.conv(x))


def get_inputs():
    return [torch.randn(BATCH, IN_CHANNELS, HEIGHT, WIDTH)]


def get_init_inputs():
    return [IN_CHANNELS, OUT_CHANNELS, KERNEL_SIZE]
