#include "python/settings_bindings.h"

#include <pybind11/stl.h>

#include "runtime/settings.h"

namespace py = pybind11;

namespace devx {

void bind_settings(py::module_& m) {
  m.def("_env_changed", &settings::environment_changed, py::arg("name"),
        "The environment variable `name` was written or removed: validate it and run its listeners");
  m.def("_set_setting", &settings::set, py::arg("name"), py::arg("value"),
        "Set a setting for this process only (None: back to the environment or default)");
  m.def("_validate_settings", &settings::validate_all);
  m.def("_setting_bool", [](const std::string& name) { return settings::get_bool(settings::id_of(name)); });
  m.def("_setting_int", [](const std::string& name) { return settings::get_int(settings::id_of(name)); });
  m.def("_settings", [] {
    py::list out;
    for (const settings::Entry& e : settings::list()) out.append(py::make_tuple(e.name, e.value, e.source, e.help));
    return out;
  });
}

}  // namespace devx
