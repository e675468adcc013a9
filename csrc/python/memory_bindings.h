// Memory history and snapshot bindings (torch_devx._C._record_memory_history, _memory_snapshot, ...).
#pragma once

#include <pybind11/pybind11.h>

namespace devx {

void bind_memory(pybind11::module_& m);

}  // namespace devx
