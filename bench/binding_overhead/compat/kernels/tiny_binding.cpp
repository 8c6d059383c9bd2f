// CUDA-Agent-mode binding of tiny.cu, the same two calls as fast/kernels/tiny_binding.cpp.
#include <torch/types.h>
#include <torch/csrc/utils/pybind.h>
#include <c10/cuda/CUDAStream.h>

#include "../binding_registry.h"

extern "C" int add_one_launch(const float* x, float* y, int64_t n, cudaStream_t stream);

static torch::Tensor add_one(torch::Tensor x) {
  TORCH_CHECK(x.is_cuda() && x.is_contiguous() && x.scalar_type() == torch::kFloat32, "x: contiguous float32 CUDA");
  torch::Tensor y = torch::empty_like(x);
  add_one_launch(x.data_ptr<float>(), y.data_ptr<float>(), x.numel(), c10::cuda::getCurrentCUDAStream().stream());
  return y;
}

static void add_one_into(torch::Tensor x, torch::Tensor y) {
  TORCH_CHECK(x.is_cuda() && x.is_contiguous() && x.scalar_type() == torch::kFloat32, "x: contiguous float32 CUDA");
  add_one_launch(x.data_ptr<float>(), y.data_ptr<float>(), x.numel(), c10::cuda::getCurrentCUDAStream().stream());
}

static void register_tiny(pybind11::module& m) {
  m.def("add_one", &add_one);
  m.def("add_one_into", &add_one_into);
}
REGISTER_BINDING(tiny, register_tiny);
