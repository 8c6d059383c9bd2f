// scale_shift_binding.cpp: the starter's fast-mode binding (replace it with your own):
// cuda_extension.scale_shift(x, a, b, config) in model_new.py (config: the launch configuration).
#include <anvil/binding.h>

// From scale_shift.cu; anvil::Stream is cudaStream_t.
extern "C" int scale_shift_launch(const float* x, float* y, int64_t n, float a, float b, int config,
                                  anvil::Stream stream);

static anvil::Tensor scale_shift(anvil::Tensor x, double a, double b, int64_t config) {
  ANVIL_CHECK(x.is_cuda() && x.is_contiguous() && x.dtype() == anvil::kFloat32,
              "x must be a contiguous float32 CUDA tensor");
  anvil::Tensor y = anvil::empty_like(x);
  int err = scale_shift_launch(x.data<float>(), y.data<float>(), x.numel(), static_cast<float>(a),
                               static_cast<float>(b), static_cast<int>(config), anvil::stream());
  ANVIL_CHECK(err == 0, "kernel launch failed with CUDA error ", err);
  return y;
}
ANVIL_REGISTER(scale_shift);
