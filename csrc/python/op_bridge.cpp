#include "python/op_bridge.h"

#include <sstream>

#include <pybind11/stl.h>
#include <torch/csrc/autograd/python_variable.h>

#include "aten/diagnostics.h"
#include "python/python_threads.h"

namespace py = pybind11;

namespace devx::python {

py::object to_python(const c10::IValue& v) {
  if (v.isTensor()) return py::reinterpret_steal<py::object>(THPVariable_Wrap(v.toTensor()));
  if (v.isTensorList()) {
    py::list out;
    for (const at::Tensor& t : v.toTensorList()) out.append(py::reinterpret_steal<py::object>(THPVariable_Wrap(t)));
    return out;
  }
  if (v.isNone()) return py::none();
  if (v.isBool()) return py::bool_(v.toBool());
  if (v.isInt()) return py::int_(v.toInt());
  if (v.isDouble()) return py::float_(v.toDouble());
  if (v.isIntList()) return py::cast(v.toIntVector());
  if (v.isString()) return py::str(v.toStringRef());
  if (v.isDevice()) return py::str(v.toDevice().str());
  // Anything else (scalar types, layouts, generators, optional lists) as its printed form.
  std::ostringstream os;
  os << v;
  return py::str(os.str());
}

py::tuple to_python_tuple(const std::vector<c10::IValue>& values) {
  py::tuple t(values.size());
  for (size_t i = 0; i < values.size(); ++i) t[i] = to_python(values[i]);
  return t;
}

namespace {

py::dict& overrides() {
  static py::dict* d = new py::dict();  // leaked: outlives the interpreter's teardown order
  return *d;
}

}  // namespace

void set_override(const std::string& op, py::object fn) {
  if (fn.is_none()) {
    if (overrides().contains(op)) overrides().attr("pop")(op);
    diag::set_override(op, false);
  } else {
    overrides()[py::str(op)] = fn;
    diag::set_override(op, true);
  }
}

py::list overridden_ops() {
  return py::list(overrides().attr("keys")());
}

void run_override(const std::string& op, const c10::OperatorHandle& handle, torch::jit::Stack* stack) {
  TORCH_CHECK(may_call_python(), "devx: ", op,
              " is overridden by a Python function, which cannot run while the interpreter shuts down");
  py::gil_scoped_acquire gil;
  const size_t nargs = handle.schema().arguments().size();
  py::tuple args(nargs);
  for (size_t i = 0; i < nargs; ++i) args[i] = to_python((*stack)[stack->size() - nargs + i]);
  py::object fn = overrides()[py::str(op)];
  py::object result = fn(*args);
  torch::jit::drop(*stack, nargs);
  const size_t nret = handle.schema().returns().size();
  auto push = [&](py::handle r) {
    TORCH_CHECK(THPVariable_Check(r.ptr()), "devx: the Python override of ", op, " must return tensors");
    stack->emplace_back(THPVariable_Unpack(r.ptr()));
  };
  if (nret == 1) {
    push(result);
  } else if (nret > 1) {
    py::tuple t = result;
    TORCH_CHECK(t.size() == nret, "devx: the Python override of ", op, " returned ", t.size(), " values, not ", nret);
    for (size_t i = 0; i < nret; ++i) push(t[i]);
  }
}

}  // namespace devx::python
