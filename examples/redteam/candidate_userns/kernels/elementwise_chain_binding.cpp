// elementwise_chain_binding.cpp: fast-mode binding of the CPU elementwise chain.
#include <anvil/binding.h>

// From elementwise_chain.cpp.
extern "C" void elementwise_chain_cpu(const float* x, const float* bias, float* y, int64_t rows, int64_t cols,
                                      float scale, float lo, float hi);

// y = clamp(gelu(x * scale + bias), clamp_min, clamp_max); bias broadcasts over the last dimension.
static anvil::Tensor elementwise_chain(anvil::Tensor x, anvil::Tensor bias, double scale, double clamp_min,
                                       double clamp_max) {
  ANVIL_CHECK(x.is_cpu() && x.is_contiguous() && x.dtype() == anvil::kFloat32,
              "x must be a contiguous float32 CPU tensor");
  ANVIL_CHECK(bias.is_cpu() && bias.is_contiguous() && bias.dtype() == anvil::kFloat32 && bias.dim() == 1,
              "bias must be a contiguous 1-d float32 CPU tensor");
  ANVIL_CHECK(x.dim() >= 1 && x.size(-1) == bias.size(0), "the last dimension of x must match bias");
  anvil::Tensor y = anvil::empty_like(x);
  int64_t cols = bias.size(0);
  int64_t rows = cols == 0 ? 0 : x.numel() / cols;
  elementwise_chain_cpu(x.data<float>(), bias.data<float>(), y.data<float>(), rows, cols, static_cast<float>(scale),
                        static_cast<float>(clamp_min), static_cast<float>(clamp_max));
  return y;
}
ANVIL_REGISTER(elementwise_chain);
