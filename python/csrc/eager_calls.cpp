// _sparse_mla_eager: the allocating prefill and decode operators called from Python without the
// torch dispatcher, for eager calls on plain tensors.
//
// Why: an eager `torch.ops.sparse_mla.sparse_decode_alloc(...)` goes through torch's boxed path
// (Python arguments -> an IValue stack -> the unboxed kernel), which was 22 % of an isolated V4
// decode call's host time on the H200 machine (py-spy, benchmarks/results/
// python-host-time-h200-2026-12-02-6f5ef2a/). These functions convert the arguments themselves
// (CPython vectorcall, no pybind11) and call the very kernels the operators register
// (attention_ops.cpp), so validation, errors and results are the operators' own.
//
// When the dispatcher is needed they return NotImplemented and the Python caller (ops.py) calls
// the operator instead: a tensor that is not exactly torch.Tensor (FakeTensor, functional or
// other subclasses: torch.compile, opcheck), a tensor that requires grad while grad mode is on
// (the operators' Autograd kernel raises for it), a tensor on a device other than CPU and CUDA
// (meta: the fake implementations), or an active torch-function / torch-dispatch mode.
#include <ATen/PythonTorchFunctionTLS.h>
#include <ATen/record_function.h>
#include <Python.h>
#include <c10/core/GradMode.h>
#include <c10/core/impl/TorchDispatchModeTLS.h>
#include <torch/csrc/Exceptions.h>
#include <torch/csrc/autograd/python_variable.h>

#include <optional>
#include <string_view>

#include "ops.h"

namespace sparse_mla::python {
namespace {

// Thrown while converting arguments when the call must go through the dispatcher.
struct UseDispatcher {};

// A CPython conversion failed and set its error (TypeError, OverflowError, ...): raise it as it
// is (HANDLE_TH_ERRORS restores it).
[[noreturn]] void raise_python_error() { throw python_error(); }

class ArgReader {
 public:
  ArgReader(const char* op, PyObject* const* args, Py_ssize_t nargs, Py_ssize_t expected)
      : args_(args) {
    if (nargs != expected) {
      throw c10::TypeError({__func__, __FILE__, static_cast<uint32_t>(__LINE__)},
                           std::string(op) + " (eager) takes " + std::to_string(expected) +
                               " arguments, got " + std::to_string(nargs));
    }
  }

  const at::Tensor& tensor(Py_ssize_t i) {
    PyObject* obj = args_[i];
    if (!THPVariable_CheckExact(obj)) throw UseDispatcher{};
    const at::Tensor& t = THPVariable_Unpack(obj);
    if (t.requires_grad() && c10::GradMode::is_enabled()) throw UseDispatcher{};
    const c10::DeviceType type = t.device().type();
    if (type != c10::DeviceType::CPU && type != c10::DeviceType::CUDA) throw UseDispatcher{};
    return t;
  }

  std::optional<at::Tensor> optional_tensor(Py_ssize_t i) {
    if (args_[i] == Py_None) return std::nullopt;
    return tensor(i);
  }

  double number(Py_ssize_t i) {
    const double v = PyFloat_AsDouble(args_[i]);
    if (v == -1.0 && PyErr_Occurred()) raise_python_error();
    return v;
  }

  std::optional<double> optional_number(Py_ssize_t i) {
    if (args_[i] == Py_None) return std::nullopt;
    return number(i);
  }

  int64_t integer(Py_ssize_t i) {
    // Saturating: d_v beyond int64 is refused by the operator's own check with the value's sign.
    int overflow = 0;
    const long long v = PyLong_AsLongLongAndOverflow(args_[i], &overflow);
    if (v == -1 && PyErr_Occurred()) raise_python_error();
    if (overflow != 0) return overflow > 0 ? INT64_MAX : INT64_MIN;
    return v;
  }

  bool flag(Py_ssize_t i) {
    const int v = PyObject_IsTrue(args_[i]);
    if (v < 0) raise_python_error();
    return v != 0;
  }

  std::optional<std::string_view> optional_text(Py_ssize_t i) {
    PyObject* obj = args_[i];
    if (obj == Py_None) return std::nullopt;
    if (!PyUnicode_Check(obj)) throw UseDispatcher{};  // the schema's error names the argument
    Py_ssize_t size = 0;
    const char* text = PyUnicode_AsUTF8AndSize(obj, &size);
    if (text == nullptr) raise_python_error();
    return std::string_view(text, static_cast<size_t>(size));
  }

 private:
  PyObject* const* args_;
};

bool modes_active() {
  return c10::impl::TorchDispatchModeTLS::stack_len() > 0 ||
         at::impl::PythonTorchFunctionTLS::stack_len() > 0;
}

PyObject* wrap_all(std::initializer_list<at::Tensor> tensors) {
  PyObject* tuple = PyTuple_New(static_cast<Py_ssize_t>(tensors.size()));
  if (tuple == nullptr) return nullptr;
  Py_ssize_t i = 0;
  for (const at::Tensor& t : tensors) {
    PyObject* item = THPVariable_Wrap(t);
    if (item == nullptr) {
      Py_DECREF(tuple);
      return nullptr;
    }
    PyTuple_SET_ITEM(tuple, i++, item);
  }
  return tuple;
}

// sparse_prefill_alloc(q, kv, indices, sm_scale, d_v, attn_sink, topk_length)
PyObject* eager_prefill_alloc(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  HANDLE_TH_ERRORS
  if (modes_active()) Py_RETURN_NOTIMPLEMENTED;
  try {
    ArgReader a("sparse_prefill", args, nargs, 7);
    const at::Tensor& q = a.tensor(0);
    const at::Tensor& kv = a.tensor(1);
    const at::Tensor& indices = a.tensor(2);
    const double sm_scale = a.number(3);
    const int64_t d_v = a.integer(4);
    const std::optional<at::Tensor> attn_sink = a.optional_tensor(5);
    const std::optional<at::Tensor> topk_length = a.optional_tensor(6);
    RECORD_FUNCTION("sparse_mla::sparse_prefill_alloc", c10::ArrayRef<const c10::IValue>{});
    at::Tensor out, max_logits, lse;
    {
      pybind11::gil_scoped_release no_gil;
      std::tie(out, max_logits, lse) =
          sparse_prefill_alloc(q, kv, indices, sm_scale, d_v, attn_sink, topk_length);
    }
    return wrap_all({out, max_logits, lse});
  } catch (const UseDispatcher&) {
    Py_RETURN_NOTIMPLEMENTED;
  }
  END_HANDLE_TH_ERRORS
}

// sparse_decode_alloc(q, kv_cache, indices, topk_length, attn_sink, extra_kv_cache,
//                     extra_indices, extra_topk_length, kv_format, softmax_scale, d_v,
//                     workspace, reuse_schedule, kv_layout, extra_kv_format, extra_kv_layout)
PyObject* eager_decode_alloc(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  HANDLE_TH_ERRORS
  if (modes_active()) Py_RETURN_NOTIMPLEMENTED;
  try {
    ArgReader a("sparse_decode", args, nargs, 16);
    const at::Tensor& q = a.tensor(0);
    const at::Tensor& kv_cache = a.tensor(1);
    const at::Tensor& indices = a.tensor(2);
    const std::optional<at::Tensor> topk_length = a.optional_tensor(3);
    const std::optional<at::Tensor> attn_sink = a.optional_tensor(4);
    const std::optional<at::Tensor> extra_kv_cache = a.optional_tensor(5);
    const std::optional<at::Tensor> extra_indices = a.optional_tensor(6);
    const std::optional<at::Tensor> extra_topk_length = a.optional_tensor(7);
    const std::optional<std::string_view> kv_format = a.optional_text(8);
    const std::optional<double> softmax_scale = a.optional_number(9);
    const int64_t d_v = a.integer(10);
    const std::optional<at::Tensor> workspace = a.optional_tensor(11);
    const bool reuse_schedule = a.flag(12);
    const std::optional<std::string_view> kv_layout = a.optional_text(13);
    const std::optional<std::string_view> extra_kv_format = a.optional_text(14);
    const std::optional<std::string_view> extra_kv_layout = a.optional_text(15);
    RECORD_FUNCTION("sparse_mla::sparse_decode_alloc", c10::ArrayRef<const c10::IValue>{});
    at::Tensor out, lse;
    {
      pybind11::gil_scoped_release no_gil;
      std::tie(out, lse) = sparse_decode_alloc(
          q, kv_cache, indices, topk_length, attn_sink, extra_kv_cache, extra_indices,
          extra_topk_length, kv_format, softmax_scale, d_v, workspace, reuse_schedule, kv_layout,
          extra_kv_format, extra_kv_layout);
    }
    return wrap_all({out, lse});
  } catch (const UseDispatcher&) {
    Py_RETURN_NOTIMPLEMENTED;
  }
  END_HANDLE_TH_ERRORS
}

PyMethodDef kMethods[] = {
    {"sparse_prefill_alloc", reinterpret_cast<PyCFunction>(eager_prefill_alloc), METH_FASTCALL,
     "sparse_mla::sparse_prefill_alloc on plain tensors, or NotImplemented"},
    {"sparse_decode_alloc", reinterpret_cast<PyCFunction>(eager_decode_alloc), METH_FASTCALL,
     "sparse_mla::sparse_decode_alloc on plain tensors, or NotImplemented"},
    {nullptr, nullptr, 0, nullptr}};

PyModuleDef kModule = {PyModuleDef_HEAD_INIT, "_sparse_mla_eager",
                       "Eager calls of the allocating operators without the dispatcher", -1,
                       kMethods};

}  // namespace
}  // namespace sparse_mla::python

PyMODINIT_FUNC PyInit__sparse_mla_eager() { return PyModule_Create(&sparse_mla::python::kModule); }
