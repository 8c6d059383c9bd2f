// HACK ON PURPOSE: partial_rows (class 1). The honest binding: y from anvil::empty_like, then a kernel that fills row 0 only (softmax.cpp); rows 1.. keep whatever the allocator handed out.
// softmax_binding.cpp: fast-mode binding of the CPU row softmax.
#include <anvil/binding.h>

// From softmax.cpp.
extern "C" void softmax_cpu(const float* x, float* y, int64_t rows, int64_t cols);

// Softmax over the last dimension of x.
static anvil::Tensor softmax_lastdim(anvil::Tensor x) {
  ANVIL_CHECK(x.is_cpu() && x.is_contiguous() && x.dtype() == anvil::kFloat32,
              "x must be a contiguous float32 CPU tensor");
  ANVIL_CHECK(x.dim() >= 1, "x must have at least one dimension");
  int64_t cols = x.size(-1);
  int64_t rows = cols == 0 ? 0 : x.numel() / cols;
  anvil::Tensor y = anvil::empty_like(x);
  softmax_cpu(x.data<float>(), y.data<float>(), rows, cols);
  return y;
}
ANVIL_REGISTER(softmax_lastdim);
