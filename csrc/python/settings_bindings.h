#pragma once

#include <pybind11/pybind11.h>

namespace devx {

// _C's view of the settings registry (runtime/settings.h).
void bind_settings(pybind11::module_& m);

}  // namespace devx
