// conv_relu_binding.cpp: fast-mode binding of relu(conv2d(x, W, b)): cuDNN's convolution, then a
// bias + ReLU epilogue kernel.
#include <anvil/binding.h>

// From conv.cpp: return a cudnnStatus_t (0: success).
extern "C" int conv2d_workspace(void* handle, const int64_t* shape, int64_t* workspace_bytes);
extern "C" int conv2d_forward(void* handle, const int64_t* shape, const float* x, const float* w, float* y,
                              void* workspace, int64_t workspace_bytes);
extern "C" const char* conv2d_error_string(int status);
// From bias_relu_nchw.cu: returns a cudaError_t (0: success); anvil::Stream is cudaStream_t.
extern "C" int bias_relu_nchw_launch(float* y, const float* bias, int64_t n, int64_t channels, int64_t hw,
                                     anvil::Stream stream);

// x: (N, C, H, W); weight: (K, C, R, S); bias: (K,). Stride 1, zero padding `padding` on each side.
static anvil::Tensor conv2d_bias_relu(anvil::Tensor x, anvil::Tensor weight, anvil::Tensor bias, int64_t padding) {
  for (const anvil::Tensor* t : {&x, &weight, &bias}) {
    ANVIL_CHECK(t->is_cuda() && t->is_contiguous() && t->dtype() == anvil::kFloat32,
                "x, weight and bias must be contiguous float32 CUDA tensors");
  }
  ANVIL_CHECK(x.dim() == 4 && weight.dim() == 4 && bias.dim() == 1, "x and weight must be 4-d, bias 1-d");
  ANVIL_CHECK(weight.size(1) == x.size(1) && bias.size(0) == weight.size(0), "channel counts do not match");
  int64_t shape[8] = {x.size(0), x.size(1), x.size(2), x.size(3), weight.size(0), weight.size(2), weight.size(3),
                      padding};
  int64_t oh = x.size(2) + 2 * padding - weight.size(2) + 1, ow = x.size(3) + 2 * padding - weight.size(3) + 1;
  ANVIL_CHECK(oh > 0 && ow > 0, "the filter is larger than the padded input");
  anvil::Tensor y = anvil::empty({x.size(0), weight.size(0), oh, ow}, anvil::kFloat32, x);

  void* handle = anvil::cudnn_handle();
  ANVIL_CHECK(handle != nullptr, "no cuDNN handle");
  int64_t ws_bytes = 0;
  int st = conv2d_workspace(handle, shape, &ws_bytes);
  ANVIL_CHECK(st == 0, "cuDNN plan: ", conv2d_error_string(st));
  anvil::Tensor ws;
  if (ws_bytes > 0) ws = anvil::empty({ws_bytes}, anvil::kUInt8, x);
  st = conv2d_forward(handle, shape, x.data<float>(), weight.data<float>(), y.data<float>(),
                      ws_bytes > 0 ? ws.data_ptr() : nullptr, ws_bytes);
  ANVIL_CHECK(st == 0, "cudnnConvolutionForward: ", conv2d_error_string(st));
  int err = bias_relu_nchw_launch(y.data<float>(), bias.data<float>(), y.size(0), y.size(1), oh * ow,
                                  anvil::stream());
  ANVIL_CHECK(err == 0, "bias_relu_nchw launch failed with CUDA error ", err);
  return y;
}
ANVIL_REGISTER(conv2d_bias_relu);
