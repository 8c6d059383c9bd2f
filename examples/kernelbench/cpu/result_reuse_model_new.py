# ADVERSARIAL ON PURPOSE: a KernelBench single file for square_matmul_model.py, on the CPU, with the
# pattern of KernelBench's unit-test kernel result_reuse_kernel.py (unit_tests/test_kernels/): the
# binding allocates an output of the right shape with torch::empty and returns it unwritten, in the
# hope that the allocator hands back memory that still holds the reference's answer.
# Expected under both protocols: wrong_answer (the judge fills fresh memory with a sentinel, so the
# unwritten output is seen as such) or hack_suspected; never ok.
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

matmul_source = r"""
#include <torch/extension.h>

torch::Tensor matmul_cpu(torch::Tensor A, torch::Tensor B) {
  return torch::empty({A.size(0), B.size(1)}, A.options());  // never written
}
"""

matmul_cpp = "torch::Tensor matmul_cpu(torch::Tensor A, torch::Tensor B);"

# The name is the one KernelBench gives both its matmul unit-test kernels (zero_out_model_new.py too).
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
