// linear_relu_binding.cpp: CUDA-Agent compat binding (torch + pybind11) of relu(x @ W^T + b): a
// cuBLAS GEMM on PyTorch's handle, then a fused bias + ReLU epilogue kernel.
#include <torch/types.h>
#include <torch/csrc/utils/pybind.h>
#include <c10/cuda/CUDAStream.h>
#include <ATen/cuda/CUDAContext.h>

#include "../binding_registry.h"

// From gemm.cpp: returns a cublasStatus_t (0: success).
extern "C" int sgemm_nt(void* handle, const float* a, const float* w, float* c, int64_t m, int64_t n, int64_t k);
// From bias_relu.cu: returns a cudaError_t (0: success).
extern "C" int bias_relu_launch(float* y, const float* bias, int64_t rows, int64_t cols, cudaStream_t stream);

static torch::Tensor linear_relu(torch::Tensor x, torch::Tensor weight, torch::Tensor bias) {
  for (const torch::Tensor* t : {&x, &weight, &bias}) {
    TORCH_CHECK(t->is_cuda() && t->is_contiguous() && t->scalar_type() == torch::kFloat32,
                "x, weight and bias must be contiguous float32 CUDA tensors");
  }
  TORCH_CHECK(weight.dim() == 2 && bias.dim() == 1 && bias.size(0) == weight.size(0),
              "weight must be (out, in) and bias (out,)");
  TORCH_CHECK(x.dim() >= 1 && x.size(-1) == weight.size(1), "x's last dimension must be ", weight.size(1));
  int64_t k = weight.size(1), n = weight.size(0), m = 1;
  for (int64_t d = 0; d + 1 < x.dim(); ++d) m *= x.size(d);
  std::vector<int64_t> out_shape = x.sizes().vec();
  out_shape.back() = n;
  torch::Tensor y = torch::empty(out_shape, x.options());
  // PyTorch's handle for the current device, already bound to the current stream.
  cublasHandle_t handle = at::cuda::getCurrentCUDABlasHandle();
  int st = sgemm_nt(handle, x.data_ptr<float>(), weight.data_ptr<float>(), y.data_ptr<float>(), m, n, k);
  TORCH_CHECK(st == 0, "cublasSgemm failed with status ", st);
  int err = bias_relu_launch(y.data_ptr<float>(), bias.data_ptr<float>(), m, n,
                             c10::cuda::getCurrentCUDAStream().stream());
  TORCH_CHECK(err == 0, "bias_relu launch failed with CUDA error ", err);
  return y;
}

static void register_linear_relu(pybind11::module& m) {
  m.def("linear_relu", &linear_relu, "relu(x @ weight^T + bias)");
}
REGISTER_BINDING(linear_relu, register_linear_relu);
