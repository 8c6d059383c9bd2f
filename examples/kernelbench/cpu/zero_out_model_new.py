# ADVERSARIAL ON PURPOSE: a KernelBench single file for square_matmul_model.py, on the CPU, with the
# pattern of KernelBench's unit-test kernel zero_out_kernel.py (unit_tests/test_kernels/): the
# binding zeroes both of its inputs in place and returns zeros of the output's shape, so a harness
# that computes the reference from the same tensors after the candidate sees 0 == 0.
# Expected under both protocols: wrong_answer / input_mutated.
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

matmul_source = r"""
#include <torch/extension.h>

torch::Tensor matmul_cpu(torch::Tensor A, torch::Tensor B) {
  A.zero_();
  B.zero_();
  return torch::zeros({A.size(0), B.size(1)}, A.options());
}
"""

matmul_cpp = "torch::Tensor matmul_cpu(torch::Tensor A, torch::Tensor B);"

# The name is the one KernelBench gives both its matmul unit-test kernels (result_reuse_model_new.py too).
matmul_module = load_inline(
    name="fast_matmul",
    cpp_sources=[matmul_cpp, matmul_source],
    functions=["matmul_cpu"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.matmul = matmul_module

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return self.matmul.matmul_cpu(A, B)
