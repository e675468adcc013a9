// torch_devx._C: bindings only. Every function forwards to libdevx_core (runtime, op layer) or to
// the Python glue beside this file (frame walker, IValue conversion, override runner).
#include <map>

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <c10/util/Exception.h>
#include <torch/csrc/Generator.h>

#include "aten/boxed_compute.h"
#include "aten/compute_allocator.h"
#include "aten/compute_scope.h"
#include "aten/cpu_fallback.h"
#include "aten/diagnostics.h"
#include "aten/op_registry.h"
#include "aten/vendor_call.h"
#include "core/init.h"
#include "profiler/device_activity.h"
#include "python/cuda_alias.h"
#include "python/frame_walker.h"
#include "python/op_bridge.h"
#include "python/memory_bindings.h"
#include "python/python_threads.h"
#include "python/settings_bindings.h"
#include "runtime/allocator.h"
#include "runtime/device.h"
#include "runtime/exception.h"
#include "runtime/fork.h"
#include "runtime/generator.h"
#include "runtime/log.h"
#include "runtime/mem_check.h"
#include "runtime/sanitizer.h"
#include "runtime/stream.h"
#include "runtime/stream_hold.h"
#include "runtime/trace.h"
#include "runtime/vendor.h"

namespace py = pybind11;

void bind_distributed(py::module_& m);  // distributed.cpp

namespace {

py::dict device_properties(int64_t index) {
  devx::device_index_arg(index);
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

// DEVX_SIM_SANITIZE found host code touching device memory: raised in the main thread at its
// next bytecode boundary, as a RuntimeError from the line that did it (or the one after).
int raise_host_accesses(void*) {
  std::string reports = devx::sanitizer::take_host_access_reports();
  if (reports.empty()) return 0;
  PyErr_SetString(PyExc_RuntimeError, reports.c_str());
  return -1;
}

// Called from the sanitizer's SIGSEGV handler: Py_AddPendingCall needs neither the GIL nor a
// thread state.
int schedule_host_access_report() {
  return Py_AddPendingCall(&raise_host_accesses, nullptr);
}

void* release_gil() {
  // While the interpreter is torn down no other thread may take the GIL: nothing to release it for.
  if (!Py_IsInitialized() || devx::python::interpreter_finalizing() || !PyGILState_Check()) return nullptr;
  return PyEval_SaveThread();
}

void restore_gil(void* saved) {
  PyEval_RestoreThread(static_cast<PyThreadState*>(saved));
}

void init(const std::vector<std::string>& vendor_paths, bool requested) {
  devx::HostHooks hooks;
  hooks.line = &devx::python::python_location;
  hooks.stack = &devx::python::python_stack;
  hooks.frames = &devx::python::python_frames;
  hooks.site = &devx::python::python_site;
  hooks.module_path = &devx::python::python_module_path;
  hooks.override_runner = &devx::python::run_override;
  hooks.notify_host_access = &schedule_host_access_report;
  hooks.release_gil = &release_gil;
  hooks.restore_gil = &restore_gil;
  devx::init_core(vendor_paths, requested, hooks);
}

void translate_errors() {
  static py::object oom = py::module_::import("torch").attr("OutOfMemoryError");
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const c10::DistError&) {
      // torch's own translator makes these torch.distributed's exception types.
      throw;
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
  devx::bind_memory(m);
  devx::bind_settings(m);
  m.def("_set_library_dirs", &devx::python::set_library_dirs,
        "The folders whose files are library code, not the user's (torch_devx._frames.LIBRARY_DIRS)");
  m.def("_init", &init, "Load a vendor library (the one requested, or the usable one of highest priority) and set up the op table");
  m.def("_collective_engine", [] {
    const char* engine = devx::vendor().collective_engine;
    return std::string(engine ? engine : "");
  });
  m.def("_vendor_name", [] { return std::string(devx::vendor().name); });
  m.def("_compute_device_type", [] { return devx::vendor().compute_device_type; });
  m.def("_route_compute_allocations", &devx::set_compute_allocations_routed,
        "Called once devx_compute_malloc/devx_compute_free are the compute device's allocator");
  m.def("_compute_allocations_routed", &devx::compute_allocations_routed);
  m.def("_device_count", [] { return static_cast<int>(devx::device_count()); });
  m.def("_current_device", [] { return static_cast<int>(devx::current_device()); });
  m.def("_set_device", [](int64_t i) { devx::set_device(devx::device_index_arg(i)); });
  m.def("_check_device_index", [](int64_t i) { devx::device_index_arg(i); });
  m.def("_synchronize", [](int64_t i) {
    const c10::DeviceIndex index = devx::device_index_arg(i);
    py::gil_scoped_release no_gil;
    devx::synchronize_device(index);
  });
  m.def("_device_properties", &device_properties);
  m.def("_stream_priority_range", [] {
    int least = 0, greatest = 0;
    devx::stream_priority_range(&least, &greatest);
    return std::make_pair(least, greatest);
  });
  // The vendor's handle of a devx stream (a cudaStream_t on the cuda vendor), as an integer:
  // what torch.cuda.Stream.cuda_stream gives for passing to other libraries.
  m.def("_stream_handle", [](int64_t device, int64_t stream_id) {
    const c10::Stream stream(c10::Stream::UNSAFE, devx::devx_device(devx::device_index_arg(device)), stream_id);
    return reinterpret_cast<uintptr_t>(devx::DevxStream(stream).handle());
  });
  m.def("_mem_get_info", [](int64_t i) { return devx::devx_allocator()->getMemoryInfo(devx::device_index_arg(i)); });
  m.def("_fallback_stats", &devx::fallback_stats);
  m.def("_reset_fallback_stats", &devx::reset_fallback_stats);
  m.def("_vendor_kernel_stats", [] {
    devx::VendorKernelStats stats = devx::vendor_kernel_stats();
    return std::make_pair(stats.calls, stats.declined);
  });
  m.def("_reset_vendor_kernel_stats", &devx::reset_vendor_kernel_stats);
  m.def("_kernel_ops", [] {
    // The loaded vendor's kernels and the ops each serves (copy.out serves the hand-written copy_).
    std::map<std::string, std::vector<std::string>> served;
    for (int i = 0; i < devx::gen::kNumOps; ++i) {
      if (devx::kernel_source(i) == devx::KernelSource::kVendor) {
        served[devx::kKernelNames[devx::kOpKernel[i]]].push_back(devx::op_overload_name(i));
      }
    }
    const int copy = devx::kernel_index("copy.out");
    if (copy >= 0 && devx::g_vendor_kernels[copy]) served["copy.out"].push_back("copy_");
    return served;
  });
  m.def("_compute_calls", &devx::compute_calls);
  m.def("_force_fallback_patterns", &devx::diag::force_fallback_patterns);
  m.def("_validate_pattern", &devx::diag::validate_pattern);
  m.def("_refresh_diagnostics", &devx::diag::refresh);
  m.def("_diag_gate_open", [] { return devx::diag::gate_open(); });
  m.def("_raw_stream", [](int64_t device) {
    return reinterpret_cast<intptr_t>(devx::getCurrentDevxStream(devx::device_index_arg(device)).handle());
  });
  auto module_or_throw = [](const std::string& name) {
    auto m = devx::log::module_named(name);
    TORCH_CHECK_VALUE(m, "devx log: unknown module '", name, "'");
    return *m;
  };
  m.def("_log_enabled", [module_or_throw](const std::string& module, int level) {
    return devx::log::enabled(module_or_throw(module), static_cast<devx::log::Level>(level));
  });
  m.def("_log", [module_or_throw](const std::string& module, int level, const std::string& message) {
    devx::log::write(module_or_throw(module), static_cast<devx::log::Level>(level), message);
  });
  m.def("_coverage", &coverage);
  m.def("_autocompare_stats", &devx::diag::autocompare_stats);
  m.def("_mem_check_records", [] {
    py::list out;
    for (const devx::memcheck::LiveRecord& r : devx::memcheck::records()) {
      py::list stack;
      for (const devx::PythonFrame& f : r.python_stack) stack.append(py::make_tuple(f.filename, f.line, f.name));
      out.append(py::make_tuple(r.ptr, r.size, r.device, r.serial, r.line, r.op, r.backward, r.forward, stack));
    }
    return out;
  });
  m.def("_mem_check_backtrace", &devx::memcheck::backtrace);
  m.def("_sync_summary", &devx::trace::sync_summary);
  m.def("_reset_sync_summary", &devx::trace::reset_sync_summary);
  m.def("_mem_check_live", &devx::memcheck::live_count);
  m.def("_sanitize_check", [] { devx::sanitizer::check_all("at sanitize_check()"); });
  m.def("_sanitizer_counts", &devx::sanitizer::counts);
  m.def("_reset_autocompare_stats", &devx::diag::reset_autocompare_stats);
  m.def("_set_op_hook", [](py::object fn, std::vector<std::string> patterns) {
    if (fn.is_none()) {
      devx::diag::set_op_hook(nullptr, {});
      return;
    }
    auto* callback = new py::object(fn);  // leaked on purpose: may be called during teardown
    devx::diag::set_op_hook(
        [callback](const std::string& op, const std::vector<c10::IValue>& args, const std::vector<c10::IValue>& results) {
          if (!devx::python::may_call_python()) return;
          py::gil_scoped_acquire gil;
          (*callback)(op, devx::python::to_python_tuple(args), devx::python::to_python_tuple(results));
        },
        patterns);
  });
  m.def("_set_runtime_hook", [](py::object fn, std::vector<std::string> kinds) {
    if (fn.is_none()) {
      devx::trace::set_runtime_hook(nullptr, {});
      return;
    }
    auto* callback = new py::object(fn);  // leaked on purpose: may be called during teardown
    devx::trace::set_runtime_hook(
        [callback](const std::string& kind, const std::string& call, const std::string& args, int status, double us) {
          if (!devx::python::may_call_python()) return;
          py::gil_scoped_acquire gil;
          try {
            (*callback)(kind, call, args, status, us);
          } catch (py::error_already_set& e) {
            // Reported as Python reports errors it cannot raise (sys.unraisablehook): raising it
            // here would lose the result of the vendor call that has already happened.
            e.discard_as_unraisable(*callback);
          }
        },
        kinds);
  });
  m.def("_install_cuda_alias", &devx::install_cuda_alias);
  m.def("_uninstall_cuda_alias", &devx::uninstall_cuda_alias);
  m.def("_cuda_alias_installed", &devx::cuda_alias_installed);
  m.def("_set_override", &devx::python::set_override);
  m.def("_overridden_ops", &devx::python::overridden_ops,
        "The ops whose kernel a Python function replaces (diagnostics.override_kernel)");
  // Only once torch.distributed is known to be built in: its types are the base of ours.
  m.def("_bind_distributed", [m]() mutable {
    if (!py::hasattr(m, "ProcessGroupDevx")) bind_distributed(m);
  });
  m.def("_get_default_generator", [](int64_t i) {
    return py::reinterpret_steal<py::object>(
        THPGenerator_initDefaultGenerator(devx::default_generator(devx::device_index_arg(i))));
  });
  m.def("_async_host_streams", [] { return devx::g_async_host_streams; });
  m.def("_profiler_device_rows", &devx::profiler::kineto_plugin_available);
  m.def("_in_bad_fork", &devx::in_bad_fork);
  m.def("_hold_stream", [](int64_t device, int64_t stream_id) {
    return devx::hold_stream(devx::DevxStream(
        c10::Stream(c10::Stream::UNSAFE, devx::devx_device(devx::device_index_arg(device)), stream_id)));
  });
  m.def("_release_stream", &devx::release_stream);
}
