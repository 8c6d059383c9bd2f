// anvil/binding.h: the torch-free binding header of anvil's fast binding mode.
//
// A candidate's kernels/*_binding.cpp includes only this header (and, if it
// likes, <cuda_runtime.h>). It never includes torch: the torch side is a
// runtime library that anvil builds once per environment and caches, so a
// binding file compiles in a fraction of a second.
//
// One short example, all a binding needs:
//
//   #include <anvil/binding.h>
//
//   extern "C" void axpby_launch(float* out, const float* a, const float* b,
//                                float alpha, int64_t n, cudaStream_t stream);
//
//   static anvil::Tensor axpby(anvil::Tensor a, anvil::Tensor b, double alpha) {
//     ANVIL_CHECK(a.is_cuda() && a.is_contiguous() && a.dtype() == anvil::kFloat32,
//                 "a must be a contiguous float32 CUDA tensor");
//     ANVIL_CHECK(b.sizes() == a.sizes(), "a and b must have the same shape");
//     anvil::Tensor out = anvil::empty_like(a);
//     axpby_launch(out.data<float>(), a.data<float>(), b.data<float>(),
//                  static_cast<float>(alpha), a.numel(), anvil::stream());
//     return out;
//   }
//   ANVIL_REGISTER(axpby);   // Python: cuda_extension.axpby(a, b, 2.0)
//
// Parameter types: anvil::Tensor (or const anvil::Tensor&), std::optional<Tensor>
// (None from Python), int64_t / int, double / float, bool, std::vector<int64_t>,
// std::vector<anvil::Tensor>. Return types: anvil::Tensor, std::vector<Tensor>
// and std::tuple<Tensor, ...> (a Python tuple), int64_t, double, bool, void.
// Arguments are positional. Output and scratch tensors come from anvil::empty /
// anvil::empty_like (backed by PyTorch's caching allocator); a returned tensor
// must be one of those or an input. anvil::stream() is PyTorch's current CUDA
// stream: launch on it. ANVIL_CHECK failures and C++ exceptions become a Python
// RuntimeError that names the function.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

struct CUstream_st;  // cudaStream_t is `CUstream_st*`; no CUDA header needed here.

// ---------------------------------------------------------------------------
// C ABI shared with anvil's runtime library. Versioned: the runtime refuses a
// module built against another ANVIL_ABI_VERSION.
// ---------------------------------------------------------------------------
extern "C" {

#define ANVIL_ABI_VERSION 1
#define ANVIL_MAX_DIMS 8
#define ANVIL_MAX_ARGS 24

typedef struct anvil_tensor {
  void* data;
  int64_t sizes[ANVIL_MAX_DIMS];
  int64_t strides[ANVIL_MAX_DIMS];  // in elements
  int32_t ndim;
  int32_t dtype;   // anvil::DType
  int32_t device;  // CUDA device index, or -1 for the CPU
  int32_t handle;  // the runtime's id for the owning torch tensor; -1: none
} anvil_tensor;

enum anvil_kind {
  ANVIL_KIND_NONE = 0,
  ANVIL_KIND_TENSOR = 1,
  ANVIL_KIND_INT = 2,
  ANVIL_KIND_FLOAT = 3,
  ANVIL_KIND_BOOL = 4,
  ANVIL_KIND_INT_LIST = 5,
  ANVIL_KIND_TENSOR_LIST = 6,
  ANVIL_KIND_OPTIONAL_TENSOR = 7,  // a parameter kind: the value is NONE or TENSOR
};

typedef struct anvil_value {
  int32_t kind;  // anvil_kind
  int32_t count;  // INT_LIST / TENSOR_LIST length
  int64_t i;      // INT, BOOL
  double f;       // FLOAT
  anvil_tensor t;  // TENSOR
  const int64_t* ints;  // INT_LIST
  const anvil_tensor* tensors;  // TENSOR_LIST
} anvil_value;

// Services the runtime lends a binding for the duration of one call.
typedef struct anvil_host {
  int32_t abi_version;
  void* ctx;
  // Allocates a contiguous tensor; returns 0, or non-zero with a message in err.
  int (*alloc)(void* ctx, const int64_t* sizes, int32_t ndim, int32_t dtype, int32_t device,
               anvil_tensor* out, char* err, size_t errlen);
  struct CUstream_st* (*stream)(void* ctx);  // current stream of the current device
  void* (*cublas)(void* ctx);  // cublasHandle_t on the current stream, or null
  void* (*cudnn)(void* ctx);   // cudnnHandle_t on the current stream, or null
} anvil_host;

typedef int (*anvil_trampoline)(const anvil_host* host, void* fn, const anvil_value* args,
                                int32_t nargs, anvil_value* ret, char* err, size_t errlen);

typedef struct anvil_op {
  const char* name;
  const char* signature;  // e.g. "axpby(Tensor, Tensor, float) -> Tensor"
  void* fn;
  anvil_trampoline call;
  int32_t nargs;
  int32_t arg_kinds[ANVIL_MAX_ARGS];
  int32_t ret_kind;
} anvil_op;

}  // extern "C"

namespace anvil {

enum class DType : int32_t {
  Float32 = 0, Float16 = 1, BFloat16 = 2, Float64 = 3,
  Int8 = 4, UInt8 = 5, Int16 = 6, Int32 = 7, Int64 = 8, Bool = 9,
};
inline constexpr DType kFloat32 = DType::Float32;
inline constexpr DType kFloat16 = DType::Float16;
inline constexpr DType kBFloat16 = DType::BFloat16;
inline constexpr DType kFloat64 = DType::Float64;
inline constexpr DType kInt8 = DType::Int8;
inline constexpr DType kUInt8 = DType::UInt8;
inline constexpr DType kInt16 = DType::Int16;
inline constexpr DType kInt32 = DType::Int32;
inline constexpr DType kInt64 = DType::Int64;
inline constexpr DType kBool = DType::Bool;

using Stream = CUstream_st*;

inline const char* dtype_name(DType d) {
  switch (d) {
    case DType::Float32: return "float32";
    case DType::Float16: return "float16";
    case DType::BFloat16: return "bfloat16";
    case DType::Float64: return "float64";
    case DType::Int8: return "int8";
    case DType::UInt8: return "uint8";
    case DType::Int16: return "int16";
    case DType::Int32: return "int32";
    case DType::Int64: return "int64";
    case DType::Bool: return "bool";
  }
  return "unknown";
}

inline size_t element_size(DType d) {
  switch (d) {
    case DType::Float32: case DType::Int32: return 4;
    case DType::Float16: case DType::BFloat16: case DType::Int16: return 2;
    case DType::Float64: case DType::Int64: return 8;
    case DType::Int8: case DType::UInt8: case DType::Bool: return 1;
  }
  return 0;
}

// The error a binding raises; the runtime turns it into a Python RuntimeError.
struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

namespace detail {
template <class... Parts>
std::string concat(const Parts&... parts) {
  std::ostringstream s;
  (s << ... << parts);
  return s.str();
}
template <class T> struct dtype_of { static constexpr bool known = false; };
template <> struct dtype_of<float> { static constexpr bool known = true; static constexpr DType value = DType::Float32; };
template <> struct dtype_of<double> { static constexpr bool known = true; static constexpr DType value = DType::Float64; };
template <> struct dtype_of<int8_t> { static constexpr bool known = true; static constexpr DType value = DType::Int8; };
template <> struct dtype_of<uint8_t> { static constexpr bool known = true; static constexpr DType value = DType::UInt8; };
template <> struct dtype_of<int16_t> { static constexpr bool known = true; static constexpr DType value = DType::Int16; };
template <> struct dtype_of<int32_t> { static constexpr bool known = true; static constexpr DType value = DType::Int32; };
template <> struct dtype_of<int64_t> { static constexpr bool known = true; static constexpr DType value = DType::Int64; };
template <> struct dtype_of<bool> { static constexpr bool known = true; static constexpr DType value = DType::Bool; };

// The runtime's services for the call in progress on this thread. Candidate
// modules are built with hidden visibility, so each module has its own.
inline thread_local const anvil_host* g_host = nullptr;

inline const anvil_host& host() {
  if (g_host == nullptr) {
    throw Error("anvil: no call in progress (anvil::empty/stream are usable only inside a registered function)");
  }
  return *g_host;
}
}  // namespace detail

#define ANVIL_CHECK(cond, ...)                                                         \
  do {                                                                                 \
    if (!(cond)) {                                                                     \
      throw ::anvil::Error(::anvil::detail::concat("check failed: " #cond ": ", ##__VA_ARGS__)); \
    }                                                                                  \
  } while (0)

// A non-owning view of a torch tensor: pointer, shape, strides, dtype, device.
class Tensor {
 public:
  Tensor() { std::memset(&v_, 0, sizeof v_); v_.handle = -1; v_.device = -1; }
  explicit Tensor(const anvil_tensor& v) : v_(v) {}

  void* data_ptr() const { return v_.data; }
  // The data pointer as T*. T must match dtype() (for float, double and the
  // integer types), or at least have the element's size (for __half and friends).
  template <class T>
  T* data() const {
    if constexpr (detail::dtype_of<std::remove_cv_t<T>>::known) {
      if (dtype() != detail::dtype_of<std::remove_cv_t<T>>::value) {
        throw Error(detail::concat("Tensor::data<T>(): tensor is ", dtype_name(dtype()),
                                   ", not ", dtype_name(detail::dtype_of<std::remove_cv_t<T>>::value)));
      }
    } else if (sizeof(T) != ::anvil::element_size(dtype())) {
      throw Error(detail::concat("Tensor::data<T>(): sizeof(T) is ", sizeof(T), " but the tensor is ",
                                 dtype_name(dtype())));
    }
    return static_cast<T*>(v_.data);
  }

  int64_t dim() const { return v_.ndim; }
  int64_t size(int64_t d) const { return v_.sizes[wrap(d)]; }
  int64_t stride(int64_t d) const { return v_.strides[wrap(d)]; }
  std::vector<int64_t> sizes() const { return std::vector<int64_t>(v_.sizes, v_.sizes + v_.ndim); }
  std::vector<int64_t> strides() const { return std::vector<int64_t>(v_.strides, v_.strides + v_.ndim); }
  int64_t numel() const {
    int64_t n = 1;
    for (int32_t i = 0; i < v_.ndim; ++i) n *= v_.sizes[i];
    return n;
  }
  DType dtype() const { return static_cast<DType>(v_.dtype); }
  size_t element_size() const { return ::anvil::element_size(dtype()); }
  bool is_cuda() const { return v_.device >= 0; }
  bool is_cpu() const { return v_.device < 0; }
  int device() const { return v_.device; }
  bool is_contiguous() const {
    int64_t expected = 1;
    for (int32_t i = v_.ndim - 1; i >= 0; --i) {
      if (v_.sizes[i] != 1 && v_.strides[i] != expected) return false;
      expected *= v_.sizes[i];
    }
    return true;
  }
  // The same contiguous data under another shape (one size may be -1).
  Tensor reshape(std::vector<int64_t> shape) const {
    if (!is_contiguous()) throw Error("Tensor::reshape: tensor is not contiguous");
    if (shape.size() > ANVIL_MAX_DIMS) throw Error("Tensor::reshape: too many dimensions");
    int64_t known = 1;
    int infer = -1;
    for (size_t i = 0; i < shape.size(); ++i) {
      if (shape[i] == -1) {
        if (infer >= 0) throw Error("Tensor::reshape: more than one -1");
        infer = static_cast<int>(i);
      } else {
        known *= shape[i];
      }
    }
    if (infer >= 0) shape[infer] = known == 0 ? 0 : numel() / known;
    int64_t n = 1;
    for (int64_t s : shape) n *= s;
    if (n != numel()) throw Error(detail::concat("Tensor::reshape: ", numel(), " elements do not fit the new shape"));
    anvil_tensor v = v_;
    v.ndim = static_cast<int32_t>(shape.size());
    int64_t stride = 1;
    for (int32_t i = v.ndim - 1; i >= 0; --i) {
      v.sizes[i] = shape[i];
      v.strides[i] = stride;
      stride *= shape[i];
    }
    return Tensor(v);
  }

  const anvil_tensor& raw() const { return v_; }

 private:
  int32_t wrap(int64_t d) const {
    int64_t w = d < 0 ? d + v_.ndim : d;
    if (w < 0 || w >= v_.ndim) {
      throw Error(detail::concat("dimension ", d, " out of range for a ", v_.ndim, "-d tensor"));
    }
    return static_cast<int32_t>(w);
  }
  anvil_tensor v_;
};

// A new contiguous tensor. device: a CUDA device index, or -1 for the CPU.
inline Tensor empty(const std::vector<int64_t>& sizes, DType dtype, int device) {
  const anvil_host& h = detail::host();
  if (sizes.size() > ANVIL_MAX_DIMS) throw Error("anvil::empty: too many dimensions");
  anvil_tensor out;
  char err[256] = {0};
  if (h.alloc(h.ctx, sizes.data(), static_cast<int32_t>(sizes.size()), static_cast<int32_t>(dtype), device,
              &out, err, sizeof err) != 0) {
    throw Error(std::string("anvil::empty: ") + err);
  }
  return Tensor(out);
}
// A new contiguous tensor on `like`'s device.
inline Tensor empty(const std::vector<int64_t>& sizes, DType dtype, const Tensor& like) {
  return empty(sizes, dtype, like.device());
}
inline Tensor empty_like(const Tensor& t) { return empty(t.sizes(), t.dtype(), t.device()); }

// PyTorch's current CUDA stream (null on a CPU-only build).
inline Stream stream() { return detail::host().stream(detail::host().ctx); }
// PyTorch's cuBLAS / cuDNN handle, already set to stream(). Cast to
// cublasHandle_t / cudnnHandle_t. Null when the runtime has none.
inline void* cublas_handle() { return detail::host().cublas(detail::host().ctx); }
inline void* cudnn_handle() { return detail::host().cudnn(detail::host().ctx); }

// ---------------------------------------------------------------------------
// Registration machinery: turns `Ret f(Args...)` into an anvil_op.
// ---------------------------------------------------------------------------
namespace detail {

template <class T> struct arg;  // how a parameter type is read from an anvil_value
template <> struct arg<Tensor> {
  static constexpr int32_t kind = ANVIL_KIND_TENSOR;
  static constexpr const char* name = "Tensor";
  static Tensor get(const anvil_value& v) { return Tensor(v.t); }
};
template <> struct arg<std::optional<Tensor>> {
  static constexpr int32_t kind = ANVIL_KIND_OPTIONAL_TENSOR;
  static constexpr const char* name = "Tensor?";
  static std::optional<Tensor> get(const anvil_value& v) {
    if (v.kind == ANVIL_KIND_NONE) return std::nullopt;
    return Tensor(v.t);
  }
};
template <> struct arg<int64_t> {
  static constexpr int32_t kind = ANVIL_KIND_INT;
  static constexpr const char* name = "int";
  static int64_t get(const anvil_value& v) { return v.i; }
};
template <> struct arg<int32_t> {
  static constexpr int32_t kind = ANVIL_KIND_INT;
  static constexpr const char* name = "int";
  static int32_t get(const anvil_value& v) {
    if (v.i < INT32_MIN || v.i > INT32_MAX) throw Error(concat("integer argument ", v.i, " does not fit in int"));
    return static_cast<int32_t>(v.i);
  }
};
template <> struct arg<double> {
  static constexpr int32_t kind = ANVIL_KIND_FLOAT;
  static constexpr const char* name = "float";
  static double get(const anvil_value& v) { return v.f; }
};
template <> struct arg<float> {
  static constexpr int32_t kind = ANVIL_KIND_FLOAT;
  static constexpr const char* name = "float";
  static float get(const anvil_value& v) { return static_cast<float>(v.f); }
};
template <> struct arg<bool> {
  static constexpr int32_t kind = ANVIL_KIND_BOOL;
  static constexpr const char* name = "bool";
  static bool get(const anvil_value& v) { return v.i != 0; }
};
template <> struct arg<std::vector<int64_t>> {
  static constexpr int32_t kind = ANVIL_KIND_INT_LIST;
  static constexpr const char* name = "list[int]";
  static std::vector<int64_t> get(const anvil_value& v) { return std::vector<int64_t>(v.ints, v.ints + v.count); }
};
template <> struct arg<std::vector<Tensor>> {
  static constexpr int32_t kind = ANVIL_KIND_TENSOR_LIST;
  static constexpr const char* name = "list[Tensor]";
  static std::vector<Tensor> get(const anvil_value& v) {
    std::vector<Tensor> out;
    out.reserve(v.count);
    for (int32_t i = 0; i < v.count; ++i) out.emplace_back(v.tensors[i]);
    return out;
  }
};

// Tensors of a list/tuple result live here until the runtime has read them.
inline thread_local std::vector<anvil_tensor> g_result_list;

template <class T> struct result;  // how a return type is written to an anvil_value
template <> struct result<void> {
  static constexpr int32_t kind = ANVIL_KIND_NONE;
  static constexpr const char* name = "None";
};
template <> struct result<Tensor> {
  static constexpr int32_t kind = ANVIL_KIND_TENSOR;
  static constexpr const char* name = "Tensor";
  static void put(const Tensor& t, anvil_value* v) { v->kind = kind; v->t = t.raw(); }
};
template <> struct result<std::vector<Tensor>> {
  static constexpr int32_t kind = ANVIL_KIND_TENSOR_LIST;
  static constexpr const char* name = "tuple[Tensor, ...]";
  static void put(const std::vector<Tensor>& ts, anvil_value* v) {
    g_result_list.clear();
    for (const Tensor& t : ts) g_result_list.push_back(t.raw());
    v->kind = kind;
    v->count = static_cast<int32_t>(g_result_list.size());
    v->tensors = g_result_list.data();
  }
};
template <class... Ts> struct result<std::tuple<Ts...>> {
  static_assert((std::is_same_v<Ts, Tensor> && ...), "anvil: a returned tuple may hold only anvil::Tensor");
  static constexpr int32_t kind = ANVIL_KIND_TENSOR_LIST;
  static constexpr const char* name = "tuple[Tensor, ...]";
  static void put(const std::tuple<Ts...>& ts, anvil_value* v) {
    g_result_list.clear();
    std::apply([](const auto&... t) { (g_result_list.push_back(t.raw()), ...); }, ts);
    v->kind = kind;
    v->count = static_cast<int32_t>(g_result_list.size());
    v->tensors = g_result_list.data();
  }
};
template <> struct result<int64_t> {
  static constexpr int32_t kind = ANVIL_KIND_INT;
  static constexpr const char* name = "int";
  static void put(int64_t x, anvil_value* v) { v->kind = kind; v->i = x; }
};
template <> struct result<int32_t> : result<int64_t> {};
template <> struct result<double> {
  static constexpr int32_t kind = ANVIL_KIND_FLOAT;
  static constexpr const char* name = "float";
  static void put(double x, anvil_value* v) { v->kind = kind; v->f = x; }
};
template <> struct result<float> : result<double> {};
template <> struct result<bool> {
  static constexpr int32_t kind = ANVIL_KIND_BOOL;
  static constexpr const char* name = "bool";
  static void put(bool x, anvil_value* v) { v->kind = kind; v->i = x ? 1 : 0; }
};

template <class T> using bare = std::remove_cv_t<std::remove_reference_t<T>>;

struct HostScope {
  explicit HostScope(const anvil_host* h) : saved(g_host) { g_host = h; }
  ~HostScope() { g_host = saved; }
  const anvil_host* saved;
};

inline void copy_error(const char* what, char* err, size_t errlen) {
  if (errlen == 0) return;
  std::strncpy(err, what, errlen - 1);
  err[errlen - 1] = '\0';
}

template <class R, class... A, size_t... I>
R invoke(R (*f)(A...), const anvil_value* args, std::index_sequence<I...>) {
  return f(arg<bare<A>>::get(args[I])...);
}

template <class R, class... A>
int trampoline(const anvil_host* host, void* fn, const anvil_value* args, int32_t nargs, anvil_value* ret,
               char* err, size_t errlen) {
  HostScope scope(host);
  try {
    if (nargs != static_cast<int32_t>(sizeof...(A))) throw Error("wrong number of arguments");
    auto f = reinterpret_cast<R (*)(A...)>(fn);
    if constexpr (std::is_void_v<R>) {
      invoke(f, args, std::index_sequence_for<A...>{});
      ret->kind = ANVIL_KIND_NONE;
    } else {
      result<bare<R>>::put(invoke(f, args, std::index_sequence_for<A...>{}), ret);
    }
    return 0;
  } catch (const std::exception& e) {
    copy_error(e.what(), err, errlen);
  } catch (...) {
    copy_error("unknown C++ exception", err, errlen);
  }
  return 1;
}

// Every module has one registry (hidden visibility keeps it per module).
inline std::vector<anvil_op>& registry() {
  static std::vector<anvil_op> ops;
  return ops;
}
inline std::vector<std::string>& signatures() {
  static std::vector<std::string> s;
  return s;
}

struct Registrar {
  template <class R, class... A>
  Registrar(const char* name, R (*fn)(A...)) {
    static_assert(sizeof...(A) <= ANVIL_MAX_ARGS, "anvil: too many parameters");
    anvil_op op;
    std::memset(&op, 0, sizeof op);
    op.name = name;
    op.fn = reinterpret_cast<void*>(fn);
    op.call = &trampoline<R, A...>;
    op.nargs = static_cast<int32_t>(sizeof...(A));
    int32_t kinds[] = {arg<bare<A>>::kind..., 0};
    for (size_t i = 0; i < sizeof...(A); ++i) op.arg_kinds[i] = kinds[i];
    op.ret_kind = result<bare<R>>::kind;
    std::string sig = std::string(name) + "(";
    const char* names[] = {arg<bare<A>>::name..., ""};
    for (size_t i = 0; i < sizeof...(A); ++i) sig += (i ? ", " : "") + std::string(names[i]);
    sig += std::string(") -> ") + result<bare<R>>::name;
    signatures().push_back(sig);
    registry().push_back(op);
  }
};

}  // namespace detail
}  // namespace anvil

#define ANVIL_CONCAT_INNER(a, b) a##b
#define ANVIL_CONCAT(a, b) ANVIL_CONCAT_INNER(a, b)
// Registers `fn` under its own name: cuda_extension.fn(...).
#define ANVIL_REGISTER(fn) ANVIL_REGISTER_AS(fn, fn)
// Registers `fn` under another Python name.
#define ANVIL_REGISTER_AS(name, fn) \
  static const ::anvil::detail::Registrar ANVIL_CONCAT(anvil_registrar_, __LINE__)(#name, &fn)
