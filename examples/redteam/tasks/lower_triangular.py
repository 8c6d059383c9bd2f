# lower_triangular: KernelBench level 1's 15_Matmul_for_lower_triangular_matrices, smaller: C =
# tril(A @ B) for lower-triangular A and B, which get_inputs() promises. A kernel may rely on it
# (KernelBench's own fixed kernel of branch sakana-kernel-repro does); every input it is timed or
# checked on must keep it.
import torch
import torch.nn as nn

N = 256


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A, B):
        return torch.tril(torch.matmul(A, B))


def get_inputs():
    A = torch.rand(N, N)
    B = torch.rand(N, N)
    A = torch.tril(A)
    B = torch.tril(B)
    return [A, B]


def get_init_inputs():
    return []
