// softmax_binding.cpp: CUDA-Agent compat binding (torch + pybind11) of the two-kernel row softmax.
#include <torch/types.h>
#include <torch/csrc/utils/pybind.h>
#include <c10/cuda/CUDAStream.h>

#include "../binding_registry.h"

// From softmax_stats.cu and softmax_normalize.cu: launchers return a cudaError_t (0: success).
extern "C" int64_t softmax_chunks(int64_t cols);
extern "C" int softmax_stats_launch(const float* x, float* stats, int64_t rows, int64_t cols, cudaStream_t stream);
extern "C" int softmax_normalize_launch(const float* x, const float* stats, float* y, int64_t rows, int64_t cols,
                                        cudaStream_t stream);

// Softmax over the last dimension of x.
static torch::Tensor softmax_lastdim(torch::Tensor x) {
  TORCH_CHECK(x.is_cuda() && x.is_contiguous() && x.scalar_type() == torch::kFloat32,
              "x must be a contiguous float32 CUDA tensor");
  TORCH_CHECK(x.dim() >= 1 && x.size(-1) % 4 == 0, "the last dimension must be a multiple of 4, got ", x.size(-1));
  int64_t cols = x.size(-1);
  int64_t rows = cols == 0 ? 0 : x.numel() / cols;
  torch::Tensor y = torch::empty_like(x);
  torch::Tensor stats = torch::empty({rows, softmax_chunks(cols), 2}, x.options());  // (max, sum) per chunk
  cudaStream_t stream = c10::cuda::getCurrentCUDAStream().stream();
  int err = softmax_stats_launch(x.data_ptr<float>(), stats.data_ptr<float>(), rows, cols, stream);
  TORCH_CHECK(err == 0, "softmax_stats launch failed with CUDA error ", err);
  err = softmax_normalize_launch(x.data_ptr<float>(), stats.data_ptr<float>(), y.data_ptr<float>(), rows, cols,
                                 stream);
  TORCH_CHECK(err == 0, "softmax_normalize launch failed with CUDA error ", err);
  return y;
}

static void register_softmax(pybind11::module& m) {
  m.def("softmax_lastdim", &softmax_lastdim, "softmax over the last dimension (two kernels)");
}
REGISTER_BINDING(softmax, register_softmax);
