# An honest KernelBench single file for add_model.py, on the CPU: the pattern of KernelBench's
# few-shot "add" candidate (prompts/few_shot/model_new_ex_add.py) in plain C++. Kept from it: the
# definitions and the declaration in two strings, the output allocated by torch::zeros_like inside
# the binding, verbose=True and the empty extra_cflags=[""] / extra_ldflags=[""].
# Expected: ok under both protocols (a creation op's fill is allocation, not torch compute).
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

source = r"""
#include <torch/extension.h>

static void add_rows(const float* a, const float* b, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

torch::Tensor elementwise_add_cpu(torch::Tensor a, torch::Tensor b) {
  TORCH_CHECK(a.device().is_cpu() && b.device().is_cpu(), "a, b: CPU tensors");
  TORCH_CHECK(a.scalar_type() == torch::kFloat32 && b.scalar_type() == torch::kFloat32, "a, b: float32");
  TORCH_CHECK(a.is_contiguous() && b.is_contiguous() && a.sizes() == b.sizes(), "a, b: contiguous, one shape");
  auto out = torch::zeros_like(a);
  add_rows(a.data_ptr<float>(), b.data_ptr<float>(), out.data_ptr<float>(), a.numel());
  return out;
}
"""

cpp_src = "torch::Tensor elementwise_add_cpu(torch::Tensor a, torch::Tensor b);"

# No cuda_sources at all: a CPU extension (an empty string would still ask for a CUDA unit).
elementwise_add = load_inline(
    name="elementwise_add_cpu",
    cpp_sources=[cpp_src, source],
    functions=["elementwise_add_cpu"],
    verbose=True,
    extra_cflags=[""],
    extra_ldflags=[""],
)


class ModelNew(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.elementwise_add = elementwise_add

    def forward(self, a, b):
        return self.elementwise_add.elementwise_add_cpu(a, b)
