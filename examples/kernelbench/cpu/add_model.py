# add: a + b on two (16, 4096) float32 tensors. The CPU problem for the pattern of KernelBench's
# few-shot "add" example (prompts/few_shot/model_ex_add.py): the smallest honest replacement.
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()

    def forward(self, a, b):
        return a + b


def get_inputs():
    return [torch.randn(16, 4096), torch.randn(16, 4096)]


def get_init_inputs():
    return []
