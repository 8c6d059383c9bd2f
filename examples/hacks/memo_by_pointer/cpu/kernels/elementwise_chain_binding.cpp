// HACK ON PURPOSE: memo_by_pointer (class 5): an honest binding, with an out= twin that lets model_new.py write into its own preallocated output buffers (the cache it serves while being timed).
// elementwise_chain_binding.cpp: fast-mode binding of the fused elementwise chain (CPU), allocating or into y.
#include <anvil/binding.h>

// From elementwise_chain.cpp.
extern "C" void elementwise_chain_cpu(const float* x, const float* bias, float* y, int64_t rows, int64_t cols,
                                      float scale, float lo, float hi);

// y = clamp(gelu(x * scale + bias), clamp_min, clamp_max), written into y (x's shape).
static void elementwise_chain_out(anvil::Tensor x, anvil::Tensor bias, anvil::Tensor y, double scale, double clamp_min,
                                  double clamp_max) {
  for (const anvil::Tensor* t : {&x, &y}) {
    ANVIL_CHECK(t->is_cpu() && t->is_contiguous() && t->dtype() == anvil::kFloat32,
                "x and y must be contiguous float32 CPU tensors");
  }
  ANVIL_CHECK(bias.is_cpu() && bias.is_contiguous() && bias.dtype() == anvil::kFloat32 && bias.dim() == 1,
              "bias must be a contiguous 1-d float32 CPU tensor");
  ANVIL_CHECK(x.dim() >= 1 && x.size(-1) == bias.size(0), "the last dimension of x must match bias");
  ANVIL_CHECK(y.sizes() == x.sizes(), "y must have x's shape");
  int64_t cols = bias.size(0);
  int64_t rows = cols == 0 ? 0 : x.numel() / cols;
  elementwise_chain_cpu(x.data<float>(), bias.data<float>(), y.data<float>(), rows, cols, static_cast<float>(scale),
                        static_cast<float>(clamp_min), static_cast<float>(clamp_max));
}
ANVIL_REGISTER(elementwise_chain_out);

static anvil::Tensor elementwise_chain(anvil::Tensor x, anvil::Tensor bias, double scale, double clamp_min,
                                       double clamp_max) {
  ANVIL_CHECK(x.is_cpu(), "x must be a CPU tensor");
  anvil::Tensor y = anvil::empty_like(x);
  elementwise_chain_out(x, bias, y, scale, clamp_min, clamp_max);
  return y;
}
ANVIL_REGISTER(elementwise_chain);
