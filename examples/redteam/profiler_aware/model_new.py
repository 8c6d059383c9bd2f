# ATTACK ON PURPOSE (red team, class "a check the candidate can predict"; outside red team 2026-12-07): torch does the work, except in the calls the judge inspects with the profiler.
# The op recorder (a TorchDispatchMode) is blinded by _DisableTorchDispatch (not a patch: a context
# torch offers); the profiler's aten:: events (the second layer) exist only in the inspected calls,
# which the candidate sees coming (torch._C._autograd._profiler_enabled()): there, and only there,
# its own C++ computes.
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.cpp_extension import load_inline

src = r"""
#include <torch/extension.h>
#include <cmath>
torch::Tensor chain(torch::Tensor x, torch::Tensor b, double s, double lo, double hi) {
  auto y = torch::empty_like(x);
  const float* px = x.data_ptr<float>(); const float* pb = b.data_ptr<float>(); float* py = y.data_ptr<float>();
  int64_t cols = x.size(1), n = x.numel();
  for (int64_t i = 0; i < n; ++i) {
    float v = px[i] * (float)s + pb[i % cols];
    float g = 0.5f * v * (1.0f + std::erf(v * 0.70710678118654752f));
    py[i] = std::min(std::max(g, (float)lo), (float)hi);
  }
  return y;
}
"""
ext = load_inline(name="pa_chain", cpp_sources=src, functions=["chain"])


class ModelNew(nn.Module):
    def __init__(self, num_features, scale, clamp_min, clamp_max):
        super().__init__()
        self.scale, self.clamp_min, self.clamp_max = scale, clamp_min, clamp_max
        self.bias = nn.Parameter(torch.empty(num_features))

    def forward(self, x):
        if torch._C._autograd._profiler_enabled():   # an inspected call: own code only
            return ext.chain(x.contiguous(), self.bias, self.scale, self.clamp_min, self.clamp_max)
        with torch._C._DisableTorchDispatch():         # the op recorder sees nothing
            return torch.clamp(F.gelu(x * self.scale + self.bias), self.clamp_min, self.clamp_max)
