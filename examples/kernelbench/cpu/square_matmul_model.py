# square_matmul: torch.matmul of two (256, 256) matrices drawn from U[0, 1). The CPU problem for
# KernelBench's adversarial unit-test kernels (unit_tests/test_kernels/*), which are judged against
# level 1's first problem, a square matrix multiplication (there N = 4096).
import torch
import torch.nn as nn

N = 256


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return torch.matmul(A, B)


def get_inputs():
    return [torch.rand(N, N), torch.rand(N, N)]


def get_init_inputs():
    return []
