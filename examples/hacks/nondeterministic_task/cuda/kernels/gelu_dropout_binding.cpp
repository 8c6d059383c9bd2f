// HACK ON PURPOSE: nondeterministic_task (class 10): an honest binding of a fused gelu + dropout kernel; the task it is evaluated on (live_dropout.py) is the problem.
// gelu_dropout_binding.cpp: fast-mode binding of dropout(gelu(x), p, training=True).
#include <anvil/binding.h>

// From gelu_dropout.cu: returns a cudaError_t (0: success); anvil::Stream is cudaStream_t.
extern "C" int gelu_dropout_launch(const float* x, float* y, int64_t n, float p, uint64_t seed, anvil::Stream stream);

static anvil::Tensor gelu_dropout(anvil::Tensor x, double p, int64_t seed) {
  ANVIL_CHECK(x.is_cuda() && x.is_contiguous() && x.dtype() == anvil::kFloat32,
              "x must be a contiguous float32 CUDA tensor");
  ANVIL_CHECK(p >= 0.0 && p <= 1.0, "p must be in [0, 1], got ", p);
  anvil::Tensor y = anvil::empty_like(x);
  int err = gelu_dropout_launch(x.data<float>(), y.data<float>(), x.numel(), static_cast<float>(p),
                                static_cast<uint64_t>(seed), anvil::stream());
  ANVIL_CHECK(err == 0, "kernel launch failed with CUDA error ", err);
  return y;
}
ANVIL_REGISTER(gelu_dropout);
