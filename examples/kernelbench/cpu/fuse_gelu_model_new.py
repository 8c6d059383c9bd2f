# An honest KernelBench single file for fuse_gelu_model.py, on the CPU: the pattern of KernelBench's
# few-shot "fuse_gelu" candidate (prompts/few_shot/model_new_ex_fuse_gelu.py) in plain C++. Kept
# from it: two functions bound (an allocating my_gelu over an out-variant my_gelu_out), const
# reference arguments, input-check macros, torch::empty_like inside the binding, load_inline
# reached as torch.utils.cpp_extension.load_inline, verbose=True, extra_cflags=[""].
# Expected: ok under both protocols.
import torch
import torch.nn as nn
import torch.utils.cpp_extension

source = r"""
#include <torch/extension.h>
#include <cmath>

#define CHECK_CPU(x) TORCH_CHECK((x).device().is_cpu(), #x " must be a CPU tensor")
#define CHECK_CONTIGUOUS(x) TORCH_CHECK((x).is_contiguous(), #x " must be contiguous")
#define CHECK_FLOAT(x) TORCH_CHECK((x).scalar_type() == torch::kFloat32, #x " must be float32")
#define CHECK_INPUT(x) CHECK_CPU(x); CHECK_CONTIGUOUS(x); CHECK_FLOAT(x)

// GELU, tanh form: 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))), one element at a time.
static void gelu_tanh(float* out, const float* in, int64_t n) {
  const float k = 0.7978845608028654f;  // sqrt(2 / pi)
  for (int64_t i = 0; i < n; ++i) {
    float x = in[i];
    out[i] = 0.5f * x * (1.0f + std::tanh(k * (x + 0.044715f * x * x * x)));
  }
}

torch::Tensor my_gelu_out(torch::Tensor output, const torch::Tensor& inp) {
  CHECK_INPUT(inp);
  CHECK_INPUT(output);
  TORCH_CHECK(output.sizes() == inp.sizes(), "output must have the input's shape");
  gelu_tanh(output.data_ptr<float>(), inp.data_ptr<float>(), inp.numel());
  return output;
}

torch::Tensor my_gelu(const torch::Tensor& inp) {
  CHECK_INPUT(inp);
  auto output = torch::empty_like(inp);
  my_gelu_out(output, inp);
  return output;
}
"""

cpp_src = """
torch::Tensor my_gelu(const torch::Tensor& inp);
torch::Tensor my_gelu_out(torch::Tensor output, const torch::Tensor& inp);
"""

fused_gelu = torch.utils.cpp_extension.load_inline(
    name="fused_gelu_cpu",
    cpp_sources=[cpp_src, source],
    functions=["my_gelu", "my_gelu_out"],
    verbose=True,
    extra_cflags=[""],
    extra_ldflags=[""],
)


class ModelNew(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fused_gelu = fused_gelu

    def forward(self, x):
        return self.fused_gelu.my_gelu(x)
