// Fast-mode binding of tiny.cu: one call allocating its output, one writing into a given one.
#include <anvil/binding.h>

extern "C" int add_one_launch(const float* x, float* y, int64_t n, anvil::Stream stream);

static anvil::Tensor add_one(anvil::Tensor x) {
  ANVIL_CHECK(x.is_cuda() && x.is_contiguous() && x.dtype() == anvil::kFloat32, "x: contiguous float32 CUDA");
  anvil::Tensor y = anvil::empty_like(x);
  add_one_launch(x.data<float>(), y.data<float>(), x.numel(), anvil::stream());
  return y;
}
ANVIL_REGISTER(add_one);

static void add_one_into(anvil::Tensor x, anvil::Tensor y) {
  ANVIL_CHECK(x.is_cuda() && x.is_contiguous() && x.dtype() == anvil::kFloat32, "x: contiguous float32 CUDA");
  add_one_launch(x.data<float>(), y.data<float>(), x.numel(), anvil::stream());
}
ANVIL_REGISTER(add_one_into);
