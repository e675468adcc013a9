// Op arguments and results as Python objects, for the Python callbacks of the diagnostics (op
// hooks, kernel overrides). Called with the GIL held.
#pragma once

#include <vector>

#include <ATen/core/ivalue.h>
#include <pybind11/pybind11.h>

namespace devx::python {

pybind11::object to_python(const c10::IValue& v);
pybind11::tuple to_python_tuple(const std::vector<c10::IValue>& values);

}  // namespace devx::python
