#include "python/override_runner.h"

#include <torch/csrc/autograd/python_variable.h>

#include "aten/diagnostics.h"
#include "python/ivalue_to_python.h"
#include "python/python_threads.h"

namespace py = pybind11;

namespace devx::python {
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
