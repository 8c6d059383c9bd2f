// anvil_torch.cpp: the torch side of anvil's fast binding mode.
//
// Built once per environment (torch, Python and CUDA versions) into
// libanvil_torch.so and cached. A fast-mode candidate module links it and
// calls anvil_rt_create_module() from its PyInit; every registered function
// becomes a METH_FASTCALL builtin whose call converts torch tensors into
// anvil_tensor views, calls the candidate's trampoline and wraps the result.
// The per-call work is a few hundred nanoseconds plus output allocation.
//
// Compile-time switches: ANVIL_WITH_CUDA (torch has CUDA), ANVIL_WITH_CUDNN.
#include <Python.h>

#include <ATen/ATen.h>
#include <c10/util/SmallVector.h>
#include <torch/csrc/autograd/python_variable.h>

#ifdef ANVIL_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#endif
#ifdef ANVIL_WITH_CUDNN
#include <ATen/cudnn/Handle.h>
#include <cudnn.h>
#endif

#include <anvil/binding.h>

#include <cstdio>
#include <cstring>
#include <string>

namespace {

struct Op {
  std::string qualified;  // "cuda_extension.axpby"
  anvil_op op;
  PyMethodDef def;  // per function, so each has its own __name__ and __doc__
};

// Tensors owned for the duration of one call: inputs, then allocations.
struct CallContext {
  c10::SmallVector<at::Tensor, 8> tensors;
  bool any_cuda = false;  // check for CUDA errors after the call only if CUDA was involved
};

bool to_scalar_type(int32_t dtype, at::ScalarType* out) {
  switch (static_cast<anvil::DType>(dtype)) {
    case anvil::DType::Float32: *out = at::kFloat; return true;
    case anvil::DType::Float16: *out = at::kHalf; return true;
    case anvil::DType::BFloat16: *out = at::kBFloat16; return true;
    case anvil::DType::Float64: *out = at::kDouble; return true;
    case anvil::DType::Int8: *out = at::kChar; return true;
    case anvil::DType::UInt8: *out = at::kByte; return true;
    case anvil::DType::Int16: *out = at::kShort; return true;
    case anvil::DType::Int32: *out = at::kInt; return true;
    case anvil::DType::Int64: *out = at::kLong; return true;
    case anvil::DType::Bool: *out = at::kBool; return true;
  }
  return false;
}

bool from_scalar_type(at::ScalarType st, int32_t* out) {
  anvil::DType d;
  switch (st) {
    case at::kFloat: d = anvil::DType::Float32; break;
    case at::kHalf: d = anvil::DType::Float16; break;
    case at::kBFloat16: d = anvil::DType::BFloat16; break;
    case at::kDouble: d = anvil::DType::Float64; break;
    case at::kChar: d = anvil::DType::Int8; break;
    case at::kByte: d = anvil::DType::UInt8; break;
    case at::kShort: d = anvil::DType::Int16; break;
    case at::kInt: d = anvil::DType::Int32; break;
    case at::kLong: d = anvil::DType::Int64; break;
    case at::kBool: d = anvil::DType::Bool; break;
    default: return false;
  }
  *out = static_cast<int32_t>(d);
  return true;
}

// Fills `out` from `t`; on failure sets a Python TypeError and returns false.
bool describe(const Op& op, int index, const at::Tensor& t, int32_t handle, anvil_tensor* out) {
  if (!t.defined()) {
    PyErr_Format(PyExc_TypeError, "%s: argument %d is an undefined tensor", op.qualified.c_str(), index);
    return false;
  }
  if (t.dim() > ANVIL_MAX_DIMS) {
    PyErr_Format(PyExc_TypeError, "%s: argument %d has %d dimensions (at most %d)", op.qualified.c_str(), index,
                 static_cast<int>(t.dim()), ANVIL_MAX_DIMS);
    return false;
  }
  if (!from_scalar_type(t.scalar_type(), &out->dtype)) {
    PyErr_Format(PyExc_TypeError, "%s: argument %d has unsupported dtype %s", op.qualified.c_str(), index,
                 c10::toString(t.scalar_type()));
    return false;
  }
  if (t.is_cuda()) {
    out->device = t.get_device();
  } else if (t.is_cpu()) {
    out->device = -1;
  } else {
    PyErr_Format(PyExc_TypeError, "%s: argument %d is on an unsupported device", op.qualified.c_str(), index);
    return false;
  }
  out->data = t.data_ptr();
  out->ndim = static_cast<int32_t>(t.dim());
  for (int32_t d = 0; d < out->ndim; ++d) {
    out->sizes[d] = t.size(d);
    out->strides[d] = t.stride(d);
  }
  out->handle = handle;
  return true;
}

int host_alloc(void* ctx, const int64_t* sizes, int32_t ndim, int32_t dtype, int32_t device, anvil_tensor* out,
               char* err, size_t errlen) {
  auto* call = static_cast<CallContext*>(ctx);
  at::ScalarType st;
  if (!to_scalar_type(dtype, &st)) {
    std::snprintf(err, errlen, "unknown dtype code %d", dtype);
    return 1;
  }
  for (int32_t i = 0; i < ndim; ++i) {
    if (sizes[i] < 0) {
      std::snprintf(err, errlen, "negative size %lld in dimension %d", static_cast<long long>(sizes[i]), i);
      return 1;
    }
  }
  try {
    at::TensorOptions opts = at::TensorOptions().dtype(st);
    if (device >= 0) {
      opts = opts.device(at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(device)));
    }
    at::Tensor t = at::empty(at::IntArrayRef(sizes, ndim), opts);
    call->any_cuda |= device >= 0;
    int32_t handle = static_cast<int32_t>(call->tensors.size());
    call->tensors.push_back(t);
    out->data = t.data_ptr();
    out->ndim = ndim;
    out->dtype = dtype;
    out->device = device;
    out->handle = handle;
    int64_t stride = 1;
    for (int32_t d = ndim - 1; d >= 0; --d) {
      out->sizes[d] = sizes[d];
      out->strides[d] = stride;
      stride *= sizes[d];
    }
    return 0;
  } catch (const c10::Error& e) {
    std::snprintf(err, errlen, "%s", e.what_without_backtrace());  // torch's backtrace helps nobody here
    return 1;
  } catch (const std::exception& e) {
    std::snprintf(err, errlen, "%s", e.what());
    return 1;
  }
}

CUstream_st* host_stream(void*) {
#ifdef ANVIL_WITH_CUDA
  return reinterpret_cast<CUstream_st*>(c10::cuda::getCurrentCUDAStream().stream());
#else
  return nullptr;
#endif
}

void* host_cublas(void*) {
#ifdef ANVIL_WITH_CUDA
  return at::cuda::getCurrentCUDABlasHandle();
#else
  return nullptr;
#endif
}

void* host_cudnn(void*) {
#ifdef ANVIL_WITH_CUDNN
  cudnnHandle_t h = at::native::getCudnnHandle();
  cudnnSetStream(h, c10::cuda::getCurrentCUDAStream().stream());
  return h;
#else
  return nullptr;
#endif
}

// Wraps a returned view: the owning tensor itself, or a strided view of it.
PyObject* wrap(const Op& op, CallContext& call, const anvil_tensor& v) {
  if (v.handle < 0 || v.handle >= static_cast<int32_t>(call.tensors.size())) {
    PyErr_Format(PyExc_RuntimeError,
                 "%s returned a tensor that is neither an input nor made by anvil::empty/empty_like",
                 op.qualified.c_str());
    return nullptr;
  }
  const at::Tensor& base = call.tensors[v.handle];
  bool same = base.data_ptr() == v.data && base.dim() == v.ndim;
  for (int32_t d = 0; same && d < v.ndim; ++d) {
    same = base.size(d) == v.sizes[d] && base.stride(d) == v.strides[d];
  }
  if (same) return THPVariable_Wrap(base);
  int64_t offset_bytes = static_cast<const char*>(v.data) - static_cast<const char*>(base.data_ptr());
  int64_t item = static_cast<int64_t>(base.element_size());
  if (offset_bytes % item != 0) {
    PyErr_Format(PyExc_RuntimeError, "%s returned a misaligned view", op.qualified.c_str());
    return nullptr;
  }
  try {
    return THPVariable_Wrap(base.as_strided(at::IntArrayRef(v.sizes, v.ndim), at::IntArrayRef(v.strides, v.ndim),
                                            base.storage_offset() + offset_bytes / item));
  } catch (const std::exception& e) {
    PyErr_Format(PyExc_RuntimeError, "%s returned an invalid view: %s", op.qualified.c_str(), e.what());
    return nullptr;
  }
}

const char* kind_name(int32_t kind) {
  switch (kind) {
    case ANVIL_KIND_TENSOR: return "a Tensor";
    case ANVIL_KIND_OPTIONAL_TENSOR: return "a Tensor or None";
    case ANVIL_KIND_INT: return "an int";
    case ANVIL_KIND_FLOAT: return "a float";
    case ANVIL_KIND_BOOL: return "a bool";
    case ANVIL_KIND_INT_LIST: return "a list of ints";
    case ANVIL_KIND_TENSOR_LIST: return "a list of Tensors";
  }
  return "?";
}

// Storage for list arguments of one call.
struct ListStorage {
  c10::SmallVector<int64_t, 16> ints[ANVIL_MAX_ARGS];
  c10::SmallVector<anvil_tensor, 4> tensors[ANVIL_MAX_ARGS];
};

bool convert_arg(const Op& op, int i, PyObject* obj, int32_t kind, CallContext& call, ListStorage& lists,
                 anvil_value* v) {
  v->kind = kind;
  switch (kind) {
    case ANVIL_KIND_OPTIONAL_TENSOR:
      if (obj == Py_None) {
        v->kind = ANVIL_KIND_NONE;
        return true;
      }
      v->kind = ANVIL_KIND_TENSOR;
      [[fallthrough]];
    case ANVIL_KIND_TENSOR: {
      if (!THPVariable_Check(obj)) break;
      const at::Tensor& t = THPVariable_Unpack(obj);
      int32_t handle = static_cast<int32_t>(call.tensors.size());
      call.tensors.push_back(t);
      call.any_cuda |= t.is_cuda();
      return describe(op, i, t, handle, &v->t);
    }
    case ANVIL_KIND_INT: {
      if (PyBool_Check(obj) || !PyIndex_Check(obj)) break;
      long long x = PyLong_AsLongLong(obj);
      if (x == -1 && PyErr_Occurred()) return false;
      v->i = x;
      return true;
    }
    case ANVIL_KIND_FLOAT: {
      if (!PyFloat_Check(obj) && !PyLong_Check(obj)) break;
      double x = PyFloat_AsDouble(obj);
      if (x == -1.0 && PyErr_Occurred()) return false;
      v->f = x;
      return true;
    }
    case ANVIL_KIND_BOOL:
      if (!PyBool_Check(obj)) break;
      v->i = obj == Py_True ? 1 : 0;
      return true;
    case ANVIL_KIND_INT_LIST: {
      if (!PyList_Check(obj) && !PyTuple_Check(obj)) break;
      Py_ssize_t n = PySequence_Fast_GET_SIZE(obj);
      PyObject** items = PySequence_Fast_ITEMS(obj);
      auto& store = lists.ints[i];
      store.resize(n);
      for (Py_ssize_t k = 0; k < n; ++k) {
        if (PyBool_Check(items[k]) || !PyIndex_Check(items[k])) {
          PyErr_Format(PyExc_TypeError, "%s: argument %d must be a list of ints (item %zd is %s)",
                       op.qualified.c_str(), i, k, Py_TYPE(items[k])->tp_name);
          return false;
        }
        store[k] = PyLong_AsLongLong(items[k]);
        if (store[k] == -1 && PyErr_Occurred()) return false;
      }
      v->ints = store.data();
      v->count = static_cast<int32_t>(n);
      return true;
    }
    case ANVIL_KIND_TENSOR_LIST: {
      if (!PyList_Check(obj) && !PyTuple_Check(obj)) break;
      Py_ssize_t n = PySequence_Fast_GET_SIZE(obj);
      PyObject** items = PySequence_Fast_ITEMS(obj);
      auto& store = lists.tensors[i];
      store.resize(n);
      for (Py_ssize_t k = 0; k < n; ++k) {
        if (!THPVariable_Check(items[k])) {
          PyErr_Format(PyExc_TypeError, "%s: argument %d must be a list of Tensors (item %zd is %s)",
                       op.qualified.c_str(), i, k, Py_TYPE(items[k])->tp_name);
          return false;
        }
        const at::Tensor& t = THPVariable_Unpack(items[k]);
        int32_t handle = static_cast<int32_t>(call.tensors.size());
        call.tensors.push_back(t);
        call.any_cuda |= t.is_cuda();
        if (!describe(op, i, t, handle, &store[k])) return false;
      }
      v->tensors = store.data();
      v->count = static_cast<int32_t>(n);
      return true;
    }
  }
  PyErr_Format(PyExc_TypeError, "%s: argument %d must be %s, not %s (signature: %s)", op.qualified.c_str(), i,
               kind_name(kind), Py_TYPE(obj)->tp_name, op.op.signature ? op.op.signature : op.op.name);
  return false;
}

PyObject* call_op(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
  const Op& op = *static_cast<const Op*>(PyCapsule_GetPointer(self, "anvil.op"));
  if (nargs != op.op.nargs) {
    PyErr_Format(PyExc_TypeError, "%s takes %d positional arguments but %zd were given (signature: %s)",
                 op.qualified.c_str(), op.op.nargs, nargs, op.op.signature ? op.op.signature : op.op.name);
    return nullptr;
  }
  CallContext call;
  ListStorage lists;
  anvil_value values[ANVIL_MAX_ARGS];
  for (Py_ssize_t i = 0; i < nargs; ++i) {
    std::memset(&values[i], 0, sizeof(anvil_value));
    if (!convert_arg(op, static_cast<int>(i), args[i], op.op.arg_kinds[i], call, lists, &values[i])) {
      return nullptr;
    }
  }
  anvil_host host{ANVIL_ABI_VERSION, &call, &host_alloc, &host_stream, &host_cublas, &host_cudnn};
  anvil_value ret;
  std::memset(&ret, 0, sizeof ret);
  char err[1024] = {0};
  int rc = op.op.call(&host, op.op.fn, values, static_cast<int32_t>(nargs), &ret, err, sizeof err);
  if (rc != 0) {
    PyErr_Format(PyExc_RuntimeError, "%s: %s", op.qualified.c_str(), err);
    return nullptr;
  }
#ifdef ANVIL_WITH_CUDA
  cudaError_t launch = call.any_cuda ? cudaGetLastError() : cudaSuccess;
  if (launch != cudaSuccess) {
    PyErr_Format(PyExc_RuntimeError, "%s: CUDA error after the call: %s (%s)", op.qualified.c_str(),
                 cudaGetErrorString(launch), cudaGetErrorName(launch));
    return nullptr;
  }
#endif
  switch (ret.kind) {
    case ANVIL_KIND_NONE: Py_RETURN_NONE;
    case ANVIL_KIND_TENSOR: return wrap(op, call, ret.t);
    case ANVIL_KIND_INT: return PyLong_FromLongLong(ret.i);
    case ANVIL_KIND_FLOAT: return PyFloat_FromDouble(ret.f);
    case ANVIL_KIND_BOOL: return PyBool_FromLong(static_cast<long>(ret.i));
    case ANVIL_KIND_TENSOR_LIST: {
      PyObject* tuple = PyTuple_New(ret.count);
      if (tuple == nullptr) return nullptr;
      for (int32_t k = 0; k < ret.count; ++k) {
        PyObject* item = wrap(op, call, ret.tensors[k]);
        if (item == nullptr) {
          Py_DECREF(tuple);
          return nullptr;
        }
        PyTuple_SET_ITEM(tuple, k, item);
      }
      return tuple;
    }
  }
  PyErr_Format(PyExc_RuntimeError, "%s returned an unknown value kind %d", op.qualified.c_str(), ret.kind);
  return nullptr;
}

void free_op(PyObject* capsule) { delete static_cast<Op*>(PyCapsule_GetPointer(capsule, "anvil.op")); }

}  // namespace

extern "C" __attribute__((visibility("default"))) PyObject* anvil_rt_create_module(const char* name,
                                                                                   const anvil_op* ops,
                                                                                   int32_t count,
                                                                                   int32_t abi_version) {
  if (abi_version != ANVIL_ABI_VERSION) {
    PyErr_Format(PyExc_ImportError,
                 "%s was built against anvil binding ABI %d, but this runtime speaks ABI %d: rebuild it with `anvil "
                 "build`",
                 name, abi_version, ANVIL_ABI_VERSION);
    return nullptr;
  }
  // Single-phase init needs a PyModuleDef; one per module, kept for the process.
  auto* def = new PyModuleDef{PyModuleDef_HEAD_INIT, strdup(name), "anvil fast-mode kernel module", -1,
                              nullptr, nullptr, nullptr, nullptr, nullptr};
  PyObject* module = PyModule_Create(def);
  if (module == nullptr) return nullptr;
  PyObject* names = PyList_New(0);
  for (int32_t i = 0; i < count; ++i) {
    auto* op = new Op{std::string(name) + "." + ops[i].name, ops[i], {}};
    op->def = {ops[i].name, reinterpret_cast<PyCFunction>(reinterpret_cast<void*>(&call_op)), METH_FASTCALL,
               ops[i].signature};
    PyObject* capsule = PyCapsule_New(op, "anvil.op", &free_op);
    if (capsule == nullptr) {
      delete op;
      Py_DECREF(module);
      Py_XDECREF(names);
      return nullptr;
    }
    PyObject* fn = PyCFunction_NewEx(&op->def, capsule, nullptr);
    Py_DECREF(capsule);
    if (fn == nullptr || PyModule_AddObject(module, ops[i].name, fn) != 0) {
      Py_XDECREF(fn);
      Py_DECREF(module);
      Py_XDECREF(names);
      return nullptr;
    }
    PyObject* sig = PyUnicode_FromString(ops[i].signature ? ops[i].signature : ops[i].name);
    PyList_Append(names, sig);
    Py_XDECREF(sig);
  }
  PyModule_AddObject(module, "__anvil_signatures__", names);
  PyModule_AddIntConstant(module, "__anvil_abi__", ANVIL_ABI_VERSION);
  return module;
}
