# flash_attn: softmax(Q K^T / sqrt(d)) V over (batch 2, 4 heads, 64 positions, head size 32),
# float32. The CPU problem for the pattern of KernelBench's few-shot "flash_attn" example
# (prompts/few_shot/model_ex_flash_attn.py), whose inputs, like these, are made on the CPU.
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()

    def forward(self, Q, K, V):
        scores = Q @ K.transpose(-2, -1) * (1.0 / math.sqrt(K.size(-1)))
        return F.softmax(scores, dim=-1) @ V


BATCH, HEADS, SEQ, HEAD_DIM = 2, 4, 64, 32


def get_inputs():
    return [torch.randn(BATCH, HEADS, SEQ, HEAD_DIM) for _ in range(3)]


def get_init_inputs():
    return []
