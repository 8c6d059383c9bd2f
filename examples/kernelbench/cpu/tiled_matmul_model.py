# tiled_matmul: a @ b for two (192, 192) float32 matrices. The CPU problem for the pattern of
# KernelBench's few-shot "tiled_matmul" example (prompts/few_shot/model_ex_tiled_matmul.py).
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()

    def forward(self, a, b):
        return a @ b


def get_inputs():
    return [torch.randn(192, 192), torch.randn(192, 192)]


def get_init_inputs():
    return []
