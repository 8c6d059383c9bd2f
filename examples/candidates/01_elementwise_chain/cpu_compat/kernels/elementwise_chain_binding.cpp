// elementwise_chain_binding.cpp: CUDA-Agent compat binding (torch + pybind11) of the CPU elementwise chain.
#include <torch/types.h>
#include <torch/csrc/utils/pybind.h>

#include "../binding_registry.h"

// From elementwise_chain.cpp.
extern "C" void elementwise_chain_cpu(const float* x, const float* bias, float* y, int64_t rows, int64_t cols,
                                      float scale, float lo, float hi);

// y = clamp(gelu(x * scale + bias), clamp_min, clamp_max); bias broadcasts over the last dimension.
static torch::Tensor elementwise_chain(torch::Tensor x, torch::Tensor bias, double scale, double clamp_min,
                                       double clamp_max) {
  TORCH_CHECK(x.is_cpu() && x.is_contiguous() && x.scalar_type() == torch::kFloat32,
              "x must be a contiguous float32 CPU tensor");
  TORCH_CHECK(bias.is_cpu() && bias.is_contiguous() && bias.scalar_type() == torch::kFloat32 && bias.dim() == 1,
              "bias must be a contiguous 1-d float32 CPU tensor");
  TORCH_CHECK(x.dim() >= 1 && x.size(-1) == bias.size(0), "the last dimension of x must match bias");
  torch::Tensor y = torch::empty_like(x);
  int64_t cols = bias.size(0);
  int64_t rows = cols == 0 ? 0 : x.numel() / cols;
  elementwise_chain_cpu(x.data_ptr<float>(), bias.data_ptr<float>(), y.data_ptr<float>(), rows, cols,
                        static_cast<float>(scale), static_cast<float>(clamp_min), static_cast<float>(clamp_max));
  return y;
}

static void register_elementwise_chain(pybind11::module& m) {
  m.def("elementwise_chain", &elementwise_chain, "clamp(gelu(x * scale + bias), clamp_min, clamp_max)");
}
REGISTER_BINDING(elementwise_chain, register_elementwise_chain);
