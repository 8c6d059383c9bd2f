// conv_relu_binding.cpp: fast-mode binding of the CPU relu(conv2d(x, W, b)).
#include <anvil/binding.h>

// From conv.cpp.
extern "C" void conv2d_bias_relu_cpu(const float* x, const float* wt, const float* bias, float* y, int64_t n,
                                     int64_t c, int64_t h, int64_t w, int64_t k, int64_t r, int64_t s, int64_t pad);

// x: (N, C, H, W); weight: (K, C, R, S); bias: (K,). Stride 1, zero padding `padding` on each side.
static anvil::Tensor conv2d_bias_relu(anvil::Tensor x, anvil::Tensor weight, anvil::Tensor bias, int64_t padding) {
  for (const anvil::Tensor* t : {&x, &weight, &bias}) {
    ANVIL_CHECK(t->is_cpu() && t->is_contiguous() && t->dtype() == anvil::kFloat32,
                "x, weight and bias must be contiguous float32 CPU tensors");
  }
  ANVIL_CHECK(x.dim() == 4 && weight.dim() == 4 && bias.dim() == 1, "x and weight must be 4-d, bias 1-d");
  ANVIL_CHECK(weight.size(1) == x.size(1) && bias.size(0) == weight.size(0), "channel counts do not match");
  ANVIL_CHECK(padding >= 0, "padding must be non-negative");
  int64_t oh = x.size(2) + 2 * padding - weight.size(2) + 1, ow = x.size(3) + 2 * padding - weight.size(3) + 1;
  ANVIL_CHECK(oh > 0 && ow > 0, "the filter is larger than the padded input");
  anvil::Tensor y = anvil::empty({x.size(0), weight.size(0), oh, ow}, anvil::kFloat32, x);
  conv2d_bias_relu_cpu(x.data<float>(), weight.data<float>(), bias.data<float>(), y.data<float>(), x.size(0),
                       x.size(1), x.size(2), x.size(3), weight.size(0), weight.size(2), weight.size(3), padding);
  return y;
}
ANVIL_REGISTER(conv2d_bias_relu);
