// ATTACK ON PURPOSE (red team, class "threads"): the honest binding; its launcher launches from a thread it joins (elementwise_chain.cu).
// elementwise_chain_binding.cpp: fast-mode binding of the fused elementwise chain.
#include <anvil/binding.h>

// From elementwise_chain.cu: returns a cudaError_t (0: success); anvil::Stream is cudaStream_t.
extern "C" int elementwise_chain_launch(const float* x, const float* bias, float* y, int64_t rows, int64_t cols,
                                        float scale, float lo, float hi, anvil::Stream stream);

// y = clamp(gelu(x * scale + bias), clamp_min, clamp_max); bias broadcasts over the last dimension.
static anvil::Tensor elementwise_chain(anvil::Tensor x, anvil::Tensor bias, double scale, double clamp_min,
                                       double clamp_max) {
  ANVIL_CHECK(x.is_cuda() && x.is_contiguous() && x.dtype() == anvil::kFloat32,
              "x must be a contiguous float32 CUDA tensor");
  ANVIL_CHECK(bias.is_cuda() && bias.is_contiguous() && bias.dtype() == anvil::kFloat32 && bias.dim() == 1,
              "bias must be a contiguous 1-d float32 CUDA tensor");
  ANVIL_CHECK(x.dim() >= 1 && x.size(-1) == bias.size(0), "the last dimension of x must match bias");
  anvil::Tensor y = anvil::empty_like(x);
  int64_t cols = bias.size(0);
  int64_t rows = cols == 0 ? 0 : x.numel() / cols;
  int err = elementwise_chain_launch(x.data<float>(), bias.data<float>(), y.data<float>(), rows, cols,
                                     static_cast<float>(scale), static_cast<float>(clamp_min),
                                     static_cast<float>(clamp_max), anvil::stream());
  ANVIL_CHECK(err == 0, "kernel launch failed with CUDA error ", err);
  return y;
}
ANVIL_REGISTER(elementwise_chain);
