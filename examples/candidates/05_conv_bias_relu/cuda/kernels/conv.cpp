// conv.cpp: host code, the fp32 NCHW convolution through cuDNN's legacy API.
//
// Descriptors and the algorithm are chosen once per shape and device and kept in a small cache, so a
// call costs one cudnnConvolutionForward. The algorithm is cuDNN's heuristic first choice among those
// that run in plain fp32 FMA math (no TF32); for task 05 on an H100 it is the same implicit-GEMM
// kernel that PyTorch runs. (cudnnFindConvolutionForwardAlgorithm was tried: its one-shot timings
// are noisy, and it found nothing faster.) Functions return a cudnnStatus_t (0: success).
#include <array>
#include <cstdint>
#include <map>
#include <mutex>

#include <cuda_runtime.h>
#include <cudnn.h>

namespace {

// n, c, h, w (input); k, r, s (filter: out channels, height, width); pad; device.
using ConvKey = std::array<int64_t, 9>;

struct ConvPlan {
  cudnnTensorDescriptor_t x = nullptr, y = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;
  cudnnConvolutionFwdAlgo_t algo = CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM;
  size_t workspace = 0;
};

#define CONV_TRY(expr)                                   \
  do {                                                   \
    cudnnStatus_t status_ = (expr);                      \
    if (status_ != CUDNN_STATUS_SUCCESS) return status_; \
  } while (0)

// The first usable candidate: it ran, and in fp32 FMA math.
bool pick_algo(const cudnnConvolutionFwdAlgoPerf_t* perf, int count, cudnnConvolutionFwdAlgo_t* algo) {
  for (int i = 0; i < count; ++i) {
    if (perf[i].status == CUDNN_STATUS_SUCCESS && perf[i].mathType == CUDNN_FMA_MATH) {
      *algo = perf[i].algo;
      return true;
    }
  }
  return false;
}

cudnnStatus_t make_plan(cudnnHandle_t handle, const int64_t* shape, ConvPlan* p) {
  int n = static_cast<int>(shape[0]), c = static_cast<int>(shape[1]), h = static_cast<int>(shape[2]),
      w = static_cast<int>(shape[3]), k = static_cast<int>(shape[4]), r = static_cast<int>(shape[5]),
      s = static_cast<int>(shape[6]), pad = static_cast<int>(shape[7]);
  CONV_TRY(cudnnCreateTensorDescriptor(&p->x));
  CONV_TRY(cudnnCreateTensorDescriptor(&p->y));
  CONV_TRY(cudnnCreateFilterDescriptor(&p->w));
  CONV_TRY(cudnnCreateConvolutionDescriptor(&p->conv));
  CONV_TRY(cudnnSetTensor4dDescriptor(p->x, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, n, c, h, w));
  CONV_TRY(cudnnSetFilter4dDescriptor(p->w, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, k, c, r, s));
  CONV_TRY(cudnnSetConvolution2dDescriptor(p->conv, pad, pad, 1, 1, 1, 1, CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
  CONV_TRY(cudnnSetConvolutionMathType(p->conv, CUDNN_FMA_MATH));
  int on, oc, oh, ow;
  CONV_TRY(cudnnGetConvolution2dForwardOutputDim(p->conv, p->x, p->w, &on, &oc, &oh, &ow));
  CONV_TRY(cudnnSetTensor4dDescriptor(p->y, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, on, oc, oh, ow));

  cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
  int returned = 0;
  CONV_TRY(cudnnGetConvolutionForwardAlgorithm_v7(handle, p->x, p->w, p->conv, p->y, CUDNN_CONVOLUTION_FWD_ALGO_COUNT,
                                                  &returned, perf));
  if (!pick_algo(perf, returned, &p->algo)) return CUDNN_STATUS_NOT_SUPPORTED;
  return cudnnGetConvolutionForwardWorkspaceSize(handle, p->x, p->w, p->conv, p->y, p->algo, &p->workspace);
}

void destroy_plan(ConvPlan* p) {
  if (p->x) cudnnDestroyTensorDescriptor(p->x);
  if (p->y) cudnnDestroyTensorDescriptor(p->y);
  if (p->w) cudnnDestroyFilterDescriptor(p->w);
  if (p->conv) cudnnDestroyConvolutionDescriptor(p->conv);
}

// The cached plan for a shape on the current device. Plans live until the process exits.
cudnnStatus_t get_plan(cudnnHandle_t handle, const int64_t* shape, const ConvPlan** out) {
  static std::mutex mu;
  static std::map<ConvKey, ConvPlan> plans;
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) return CUDNN_STATUS_EXECUTION_FAILED;
  ConvKey key;
  for (int i = 0; i < 8; ++i) key[i] = shape[i];
  key[8] = device;
  std::lock_guard<std::mutex> lock(mu);
  auto it = plans.find(key);
  if (it == plans.end()) {
    ConvPlan p;
    cudnnStatus_t st = make_plan(handle, shape, &p);
    if (st != CUDNN_STATUS_SUCCESS) {
      destroy_plan(&p);
      return st;
    }
    it = plans.emplace(key, p).first;
  }
  *out = &it->second;
  return CUDNN_STATUS_SUCCESS;
}

}  // namespace

// shape: {n, c, h, w, k, r, s, pad} of an NCHW input (n, c, h, w), a filter (k, c, r, s), stride 1.
// Sets *workspace_bytes to the scratch conv2d_forward needs for this shape.
extern "C" int conv2d_workspace(void* handle, const int64_t* shape, int64_t* workspace_bytes) {
  const ConvPlan* p = nullptr;
  cudnnStatus_t st = get_plan(static_cast<cudnnHandle_t>(handle), shape, &p);
  if (st == CUDNN_STATUS_SUCCESS) *workspace_bytes = static_cast<int64_t>(p->workspace);
  return st;
}

// y (n, k, h + 2 pad - r + 1, w + 2 pad - s + 1) = conv2d(x, w); `handle` is bound to the caller's stream.
extern "C" int conv2d_forward(void* handle, const int64_t* shape, const float* x, const float* w, float* y,
                              void* workspace, int64_t workspace_bytes) {
  auto h = static_cast<cudnnHandle_t>(handle);
  const ConvPlan* p = nullptr;
  CONV_TRY(get_plan(h, shape, &p));
  if (workspace_bytes < static_cast<int64_t>(p->workspace)) return CUDNN_STATUS_BAD_PARAM;
  const float alpha = 1.0f, beta = 0.0f;
  return cudnnConvolutionForward(h, &alpha, p->x, x, p->w, w, p->conv, p->algo, workspace, p->workspace, &beta, p->y,
                                 y);
}

extern "C" const char* conv2d_error_string(int status) {
  return cudnnGetErrorString(static_cast<cudnnStatus_t>(status));
}
