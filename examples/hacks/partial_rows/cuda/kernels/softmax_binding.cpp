// HACK ON PURPOSE: partial_rows (class 1). The honest binding: y from anvil::empty_like, then the two launchers, which only cover row 0 (softmax_stats.cu, softmax_normalize.cu); rows 1.. keep whatever the allocator handed out.
// softmax_binding.cpp: fast-mode binding of the two-kernel row softmax (statistics, then normalize).
#include <anvil/binding.h>

// From softmax_stats.cu and softmax_normalize.cu: launchers return a cudaError_t (0: success);
// anvil::Stream is cudaStream_t.
extern "C" int64_t softmax_chunks(int64_t cols);
extern "C" int softmax_stats_launch(const float* x, float* stats, int64_t rows, int64_t cols, anvil::Stream stream);
extern "C" int softmax_normalize_launch(const float* x, const float* stats, float* y, int64_t rows, int64_t cols,
                                        anvil::Stream stream);

// Softmax over the last dimension of x.
static anvil::Tensor softmax_lastdim(anvil::Tensor x) {
  ANVIL_CHECK(x.is_cuda() && x.is_contiguous() && x.dtype() == anvil::kFloat32,
              "x must be a contiguous float32 CUDA tensor");
  ANVIL_CHECK(x.dim() >= 1 && x.size(-1) % 4 == 0, "the last dimension must be a multiple of 4, got ", x.size(-1));
  int64_t cols = x.size(-1);
  int64_t rows = cols == 0 ? 0 : x.numel() / cols;
  anvil::Tensor y = anvil::empty_like(x);
  anvil::Tensor stats = anvil::empty({rows, softmax_chunks(cols), 2}, anvil::kFloat32, x);  // (max, sum) per chunk
  int err = softmax_stats_launch(x.data<float>(), stats.data<float>(), rows, cols, anvil::stream());
  ANVIL_CHECK(err == 0, "softmax_stats launch failed with CUDA error ", err);
  err = softmax_normalize_launch(x.data<float>(), stats.data<float>(), y.data<float>(), rows, cols, anvil::stream());
  ANVIL_CHECK(err == 0, "softmax_normalize launch failed with CUDA error ", err);
  return y;
}
ANVIL_REGISTER(softmax_lastdim);
