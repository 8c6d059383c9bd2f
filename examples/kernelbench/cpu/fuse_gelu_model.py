# fuse_gelu: GELU, tanh form, on a (256, 1024) float32 tensor. The CPU problem for the pattern of
# KernelBench's few-shot "fuse_gelu" example (prompts/few_shot/model_ex_fuse_gelu.py).
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()

    def forward(self, x):
        return F.gelu(x, approximate="tanh")


def get_inputs():
    return [torch.randn(256, 1024)]


def get_init_inputs():
    return []
