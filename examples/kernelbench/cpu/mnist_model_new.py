# A KernelBench single file for mnist_model.py, on the CPU, that replaces only the max-pool: the
# pattern of KernelBench's few-shot "mnist2" candidate (prompts/few_shot/model_new_ex_mnist2.py).
# The convolutions, ReLUs, linear layers and log-softmax stay torch's, called from the forward.
# Kept from it: the same layers under the same names (Model's weights load by name), the pool's
# output from torch::empty inside the binding, int arguments, verbose=True, extra_cflags=[""].
# Expected: ok under kernelbench (torch ops allowed); hack_suspected / torch_fallback under
# cuda-agent, whose rules forbid torch compute in the forward.
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.cpp_extension import load_inline

source = r"""
#include <torch/extension.h>
#include <algorithm>
#include <limits>

// Max over each window of one (height, width) plane; windows past the edge are cut short.
static void max_pool_plane(const float* in, float* out, int64_t in_h, int64_t in_w, int64_t out_h, int64_t out_w,
                           int64_t window, int64_t stride) {
  for (int64_t oh = 0; oh < out_h; ++oh) {
    for (int64_t ow = 0; ow < out_w; ++ow) {
      float best = -std::numeric_limits<float>::max();
      for (int64_t h = oh * stride; h < std::min(oh * stride + window, in_h); ++h) {
        for (int64_t w = ow * stride; w < std::min(ow * stride + window, in_w); ++w) {
          best = std::max(best, in[h * in_w + w]);
        }
      }
      out[oh * out_w + ow] = best;
    }
  }
}

torch::Tensor max_pool2d_cpu(torch::Tensor input, int kernel_size, int stride) {
  TORCH_CHECK(input.device().is_cpu() && input.scalar_type() == torch::kFloat32 && input.dim() == 4,
              "input: float32 CPU tensor (batch, channels, height, width)");
  input = input.contiguous();
  const int64_t n = input.size(0), c = input.size(1), in_h = input.size(2), in_w = input.size(3);
  const int64_t out_h = (in_h - kernel_size) / stride + 1, out_w = (in_w - kernel_size) / stride + 1;
  auto output = torch::empty({n, c, out_h, out_w}, input.options());
  const float* in = input.data_ptr<float>();
  float* out = output.data_ptr<float>();
  for (int64_t p = 0; p < n * c; ++p) {
    max_pool_plane(in + p * in_h * in_w, out + p * out_h * out_w, in_h, in_w, out_h, out_w, kernel_size, stride);
  }
  return output;
}
"""

cpp_src = "torch::Tensor max_pool2d_cpu(torch::Tensor input, int kernel_size, int stride);"

custom_max_pool = load_inline(
    name="custom_max_pool_cpu",
    cpp_sources=[cpp_src, source],
    functions=["max_pool2d_cpu"],
    verbose=True,
    extra_cflags=[""],
    extra_ldflags=[""],
)


class ModelNew(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 10, kernel_size=5)
        self.conv2 = nn.Conv2d(10, 20, kernel_size=5)
        self.fc1 = nn.Linear(320, 50)
        self.fc2 = nn.Linear(50, 10)
        self.custom_max_pool = custom_max_pool

    def forward(self, x):
        # only the pools are the extension's; relu commutes with max, so pooling after it is the same
        x = self.custom_max_pool.max_pool2d_cpu(F.relu(self.conv1(x)), 2, 2)
        x = self.custom_max_pool.max_pool2d_cpu(F.relu(self.conv2(x)), 2, 2)
        x = x.view(-1, 320)
        x = F.relu(self.fc1(x))
        return F.log_softmax(self.fc2(x), dim=1)
