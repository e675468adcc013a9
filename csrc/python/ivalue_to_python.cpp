#include "python/ivalue_to_python.h"

#include <sstream>

#include <pybind11/stl.h>
#include <torch/csrc/autograd/python_variable.h>

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

}  // namespace devx::python
