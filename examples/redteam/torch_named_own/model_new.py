# ATTACK ON PURPOSE (red team, class "a verdict of the candidate's choosing"): torch does all the
# work, past the profiler: each op called through at::_ops::X::redispatch with the CUDA key (the
# dispatcher records no op on a redispatch), so no forbidden op is seen (torch_fallback). Its module holds kernels it
# names after ATen's elementwise kernels (vectorized_elementwise_kernel, unrolled_elementwise_kernel,
# elementwise_kernel), never launched: anvil matched traced kernels by base name, so ATen's kernels
# counted as its own work (100% own: foreign_work missed). Found reading
# python/anvil/policy.py (2026-12-07); a kernel of torch's namespaces is now never the candidate's: its
# own kernels never run (no_kernels, H100 2026-12-07), or ATen's are foreign_work beside a launched one.
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
#include <ATen/Operators.h>

__global__ void vectorized_elementwise_kernel(float* p) { if (p) p[0] = 0.f; }
__global__ void unrolled_elementwise_kernel(float* p) { if (p) p[0] = 0.f; }
__global__ void elementwise_kernel(float* p) { if (p) p[0] = 0.f; }

torch::Tensor chain(torch::Tensor x, torch::Tensor bias, double scale, double lo, double hi) {
  auto cuda = c10::DispatchKeySet(c10::DispatchKey::CUDA);
  auto y = at::_ops::add_Tensor::redispatch(cuda, bias, x, scale);  // bias + scale * x
  y = at::_ops::gelu::redispatch(cuda, y, "none");
  return at::_ops::clamp::redispatch(cuda, y, lo, hi);
}
"""

cpp_source = "torch::Tensor chain(torch::Tensor x, torch::Tensor bias, double scale, double lo, double hi);"

ext = load_inline(name="torch_named_own", cpp_sources=cpp_source, cuda_sources=cuda_source, functions=["chain"])


class ModelNew(nn.Module):
    def __init__(self, num_features, scale, clamp_min, clamp_max):
        super().__init__()
        self.scale = scale
        self.clamp_min = clamp_min
        self.clamp_max = clamp_max
        self.bias = nn.Parameter(torch.empty(num_features))

    def forward(self, x):
        return ext.chain(x.contiguous(), self.bias, self.scale, self.clamp_min, self.clamp_max)
