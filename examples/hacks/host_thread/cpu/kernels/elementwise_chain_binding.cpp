// HACK ON PURPOSE: host_thread (class 4). An out= binding (the caller passes y): model_new.py allocates y, returns it at once and calls this from a background Python thread a millisecond later. anvil's runtime keeps the GIL during a call, so once the thread is inside, the judge's Python cannot run again (to read y) until y is complete, while the judge's timer already stopped.
// elementwise_chain_binding.cpp: fast-mode binding of the CPU elementwise chain, writing into a given y.
#include <anvil/binding.h>

// From elementwise_chain.cpp.
extern "C" void elementwise_chain_cpu(const float* x, const float* bias, float* y, int64_t rows, int64_t cols,
                                      float scale, float lo, float hi);

// y = clamp(gelu(x * scale + bias), clamp_min, clamp_max), written into y (same shape as x).
static void elementwise_chain_out(anvil::Tensor x, anvil::Tensor bias, anvil::Tensor y, double scale,
                                  double clamp_min, double clamp_max) {
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
