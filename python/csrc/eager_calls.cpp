// _sparse_mla_eager: the prefill, decode and cache-writer operators called from Python without the
// torch dispatcher, for eager calls on plain tensors.
//
// Why: an eager `torch.ops.sparse_mla.sparse_decode_alloc(...)` goes through torch's boxed path
// (Python arguments -> an IValue stack -> the unboxed kernel), which was 22 % of an isolated V4
// decode call's host time on the H200 machine (py-spy, benchmarks/results/
// python-host-time-h200-2026-12-02-6f5ef2a/). These functions convert the arguments themselves
// (CPython vectorcall) and call the very kernels the operators register (attention_ops.cpp,
// kv_cache_ops.cpp), so validation, errors and results are the operators' own.
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

// One eager call: `body` reads its arguments and runs the operator's kernel, returning the Python
// result; torch's exception translation around it (c10::ValueError -> ValueError, ...), and
// NotImplemented when the call needs the dispatcher.
template <typename Body>
PyObject* eager_call(const char* op, PyObject* const* args, Py_ssize_t nargs, Py_ssize_t expected,
                     Body&& body) {
  HANDLE_TH_ERRORS
  if (modes_active()) Py_RETURN_NOTIMPLEMENTED;
  try {
    ArgReader a(op, args, nargs, expected);
    return body(a);
  } catch (const UseDispatcher&) {
    Py_RETURN_NOTIMPLEMENTED;
  }
  END_HANDLE_TH_ERRORS
}

// Runs a kernel without the GIL (as torch.ops' Python entry does), under the operator's name in
// the profiler.
template <typename Fn>
auto run_released(const char* name, Fn&& fn) {
  RECORD_FUNCTION(name, c10::ArrayRef<const c10::IValue>{});
  pybind11::gil_scoped_release no_gil;
  return fn();
}

// The inputs every decode operator takes first: (q, kv_cache, indices, topk_length, attn_sink,
// extra_kv_cache, extra_indices, extra_topk_length, kv_format, softmax_scale, d_v, workspace,
// reuse_schedule), and its three cache names (kv_layout, extra_kv_format, extra_kv_layout) at
// `names_at`.
struct DecodeInputs {
  at::Tensor q, kv_cache, indices;
  std::optional<at::Tensor> topk_length, attn_sink, extra_kv_cache, extra_indices,
      extra_topk_length, workspace;
  std::optional<std::string_view> kv_format, kv_layout, extra_kv_format, extra_kv_layout;
  std::optional<double> softmax_scale;
  int64_t d_v = 0;
  bool reuse_schedule = false;

  DecodeInputs(ArgReader& a, Py_ssize_t names_at)
      : q(a.tensor(0)),
        kv_cache(a.tensor(1)),
        indices(a.tensor(2)),
        topk_length(a.optional_tensor(3)),
        attn_sink(a.optional_tensor(4)),
        extra_kv_cache(a.optional_tensor(5)),
        extra_indices(a.optional_tensor(6)),
        extra_topk_length(a.optional_tensor(7)),
        workspace(a.optional_tensor(11)),
        kv_format(a.optional_text(8)),
        kv_layout(a.optional_text(names_at)),
        extra_kv_format(a.optional_text(names_at + 1)),
        extra_kv_layout(a.optional_text(names_at + 2)),
        softmax_scale(a.optional_number(9)),
        d_v(a.integer(10)),
        reuse_schedule(a.flag(12)) {}
};

// The inputs of both prefill operators: (q, kv, indices, sm_scale, d_v, attn_sink, topk_length).
struct PrefillInputs {
  at::Tensor q, kv, indices;
  double sm_scale = 0;
  int64_t d_v = 0;
  std::optional<at::Tensor> attn_sink, topk_length;

  explicit PrefillInputs(ArgReader& a)
      : q(a.tensor(0)),
        kv(a.tensor(1)),
        indices(a.tensor(2)),
        sm_scale(a.number(3)),
        d_v(a.integer(4)),
        attn_sink(a.optional_tensor(5)),
        topk_length(a.optional_tensor(6)) {}
};

// sparse_prefill_alloc(<PrefillInputs>)
PyObject* eager_prefill_alloc(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  return eager_call("sparse_prefill", args, nargs, 7, [](ArgReader& a) -> PyObject* {
    const PrefillInputs p(a);
    const auto [out, max_logits, lse] = run_released("sparse_mla::sparse_prefill_alloc", [&] {
      return sparse_prefill_alloc(p.q, p.kv, p.indices, p.sm_scale, p.d_v, p.attn_sink,
                                  p.topk_length);
    });
    return wrap_all({out, max_logits, lse});
  });
}

// sparse_prefill(<PrefillInputs>, out, max_logits, lse)
PyObject* eager_prefill(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  return eager_call("sparse_prefill", args, nargs, 10, [](ArgReader& a) -> PyObject* {
    const PrefillInputs p(a);
    at::Tensor out = a.tensor(7), max_logits = a.tensor(8), lse = a.tensor(9);
    run_released("sparse_mla::sparse_prefill", [&] {
      sparse_prefill(p.q, p.kv, p.indices, p.sm_scale, p.d_v, p.attn_sink, p.topk_length, out,
                     max_logits, lse);
    });
    Py_RETURN_NONE;
  });
}

// sparse_decode_alloc(<DecodeInputs>, kv_layout, extra_kv_format, extra_kv_layout)
PyObject* eager_decode_alloc(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  return eager_call("sparse_decode", args, nargs, 16, [](ArgReader& a) -> PyObject* {
    const DecodeInputs d(a, 13);
    const auto [out, lse] = run_released("sparse_mla::sparse_decode_alloc", [&] {
      return sparse_decode_alloc(d.q, d.kv_cache, d.indices, d.topk_length, d.attn_sink,
                                 d.extra_kv_cache, d.extra_indices, d.extra_topk_length,
                                 d.kv_format, d.softmax_scale, d.d_v, d.workspace, d.reuse_schedule,
                                 d.kv_layout, d.extra_kv_format, d.extra_kv_layout);
    });
    return wrap_all({out, lse});
  });
}

// sparse_decode(<DecodeInputs>, out, lse, kv_layout, extra_kv_format, extra_kv_layout)
PyObject* eager_decode(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  return eager_call("sparse_decode", args, nargs, 18, [](ArgReader& a) -> PyObject* {
    const DecodeInputs d(a, 15);
    at::Tensor out = a.tensor(13), lse = a.tensor(14);
    run_released("sparse_mla::sparse_decode", [&] {
      sparse_decode(d.q, d.kv_cache, d.indices, d.topk_length, d.attn_sink, d.extra_kv_cache,
                    d.extra_indices, d.extra_topk_length, d.kv_format, d.softmax_scale, d.d_v,
                    d.workspace, d.reuse_schedule, out, lse, d.kv_layout, d.extra_kv_format,
                    d.extra_kv_layout);
    });
    Py_RETURN_NONE;
  });
}

// write_kv_cache(rows, slot_mapping, cache, kv_format, kv_layout): an engine's every step.
PyObject* eager_write_kv_cache(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  return eager_call("write_kv_cache", args, nargs, 5, [](ArgReader& a) -> PyObject* {
    const at::Tensor& rows = a.tensor(0);
    const at::Tensor& slot_mapping = a.tensor(1);
    at::Tensor cache = a.tensor(2);
    const std::optional<std::string_view> kv_format = a.optional_text(3);
    const std::optional<std::string_view> kv_layout = a.optional_text(4);
    run_released("sparse_mla::write_kv_cache",
                 [&] { write_kv_cache(rows, slot_mapping, cache, kv_format, kv_layout); });
    Py_RETURN_NONE;
  });
}

PyMethodDef kMethods[] = {
    {"sparse_prefill_alloc", reinterpret_cast<PyCFunction>(eager_prefill_alloc), METH_FASTCALL,
     "sparse_mla::sparse_prefill_alloc on plain tensors, or NotImplemented"},
    {"sparse_prefill", reinterpret_cast<PyCFunction>(eager_prefill), METH_FASTCALL,
     "sparse_mla::sparse_prefill on plain tensors, or NotImplemented"},
    {"sparse_decode_alloc", reinterpret_cast<PyCFunction>(eager_decode_alloc), METH_FASTCALL,
     "sparse_mla::sparse_decode_alloc on plain tensors, or NotImplemented"},
    {"sparse_decode", reinterpret_cast<PyCFunction>(eager_decode), METH_FASTCALL,
     "sparse_mla::sparse_decode on plain tensors, or NotImplemented"},
    {"write_kv_cache", reinterpret_cast<PyCFunction>(eager_write_kv_cache), METH_FASTCALL,
     "sparse_mla::write_kv_cache on plain tensors, or NotImplemented"},
    {nullptr, nullptr, 0, nullptr}};

PyModuleDef kModule = {PyModuleDef_HEAD_INIT, "_sparse_mla_eager",
                       "Eager calls of the operators without the dispatcher", -1, kMethods};

}  // namespace
}  // namespace sparse_mla::python

PyMODINIT_FUNC PyInit__sparse_mla_eager() { return PyModule_Create(&sparse_mla::python::kModule); }
