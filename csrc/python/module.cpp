// torch_devx._C: bindings only. Every function forwards to the runtime or the op layer.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <c10/util/Exception.h>
#include <torch/csrc/Generator.h>

#include "aten/boxed_compute.h"
#include "aten/compute_scope.h"
#include "aten/cpu_fallback.h"
#include "aten/diagnostics.h"
#include "aten/op_registry.h"
#include "runtime/allocator.h"
#include "runtime/device.h"
#include "runtime/env.h"
#include "runtime/exception.h"
#include "runtime/generator.h"
#include "runtime/log.h"
#include "runtime/vendor.h"

namespace py = pybind11;

namespace {

void init(const std::string& library_dir) {
  devx::log::reload();
  devx::load_vendor(library_dir);
  devx::install_compute_routing(devx::vendor().compute_device_type);
  devx::init_kernel_table();
  devx::register_long_tail();
  devx::diag::refresh();
}

py::dict device_properties(int index) {
  devx::check_device_index(static_cast<c10::DeviceIndex>(index));
  DevxDeviceProperties props{};
  DEVX_VENDOR_CHECK(devx::g_vendor->device_properties(index, &props));
  py::dict d;
  d["name"] = std::string(props.name);
  d["total_memory"] = props.total_memory;
  d["major"] = props.major;
  d["minor"] = props.minor;
  d["multi_processor_count"] = props.multi_processor_count;
  d["is_integrated"] = static_cast<bool>(props.is_integrated);
  return d;
}

std::vector<std::pair<std::string, std::string>> coverage() {
  std::vector<std::pair<std::string, std::string>> out;
  for (int i = 0; i < devx::gen::kNumOps; ++i) {
    const char* source = "fallback";
    switch (devx::kernel_source(i)) {
      case devx::KernelSource::kVendor: source = "vendor"; break;
      case devx::KernelSource::kCompute: source = "aten"; break;
      case devx::KernelSource::kFallback: break;
    }
    out.emplace_back(devx::op_overload_name(i), source);
  }
  for (const std::string& name : devx::long_tail_ops()) out.emplace_back(name, "aten-boxed");
  for (const std::string& name : devx::long_tail_refused()) out.emplace_back(name, "fallback");
  return out;
}

void translate_errors() {
  static py::object oom = py::module_::import("torch").attr("OutOfMemoryError");
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const c10::OutOfMemoryError& e) {
      PyErr_SetString(oom.ptr(), e.what_without_backtrace());
    } catch (const c10::ValueError& e) {
      PyErr_SetString(PyExc_ValueError, e.what_without_backtrace());
    } catch (const c10::IndexError& e) {
      PyErr_SetString(PyExc_IndexError, e.what_without_backtrace());
    } catch (const c10::Error& e) {
      PyErr_SetString(PyExc_RuntimeError, e.what_without_backtrace());
    }
  });
}

}  // namespace

PYBIND11_MODULE(_C, m) {
  translate_errors();
  m.def("_init", &init, "Load the vendor library from the given directory and set up the op table");
  m.def("_vendor_name", [] { return std::string(devx::vendor().name); });
  m.def("_compute_device_type", [] { return devx::vendor().compute_device_type; });
  m.def("_device_count", [] { return static_cast<int>(devx::device_count()); });
  m.def("_current_device", [] { return static_cast<int>(devx::current_device()); });
  m.def("_set_device", [](int i) { devx::set_device(static_cast<c10::DeviceIndex>(i)); });
  m.def("_check_device_index", [](int i) { devx::check_device_index(static_cast<c10::DeviceIndex>(i)); });
  m.def("_synchronize", [](int i) {
    py::gil_scoped_release no_gil;
    devx::synchronize_device(static_cast<c10::DeviceIndex>(i));
  });
  m.def("_device_properties", &device_properties);
  m.def("_mem_get_info", [](int i) { return devx::devx_allocator()->getMemoryInfo(static_cast<c10::DeviceIndex>(i)); });
  m.def("_env_changed", &devx::env::bump_generation, "Tell the backend os.environ was written");
  m.def("_fallback_stats", &devx::fallback_stats);
  m.def("_reset_fallback_stats", &devx::reset_fallback_stats);
  m.def("_force_fallback_patterns", &devx::diag::force_fallback_patterns);
  m.def("_validate_pattern", &devx::diag::validate_pattern);
  m.def("_refresh_diagnostics", &devx::diag::refresh);
  m.def("_reload_log_levels", &devx::log::reload);
  m.def("_coverage", &coverage);
  m.def("_get_default_generator", [](int i) {
    return py::reinterpret_steal<py::object>(
        THPGenerator_initDefaultGenerator(devx::default_generator(static_cast<c10::DeviceIndex>(i))));
  });
}
