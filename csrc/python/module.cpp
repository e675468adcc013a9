// torch_devx._C: bindings only. Every function forwards to the runtime or the op layer.
#include <chrono>
#include <map>
#include <sstream>
#include <unordered_map>

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <c10/util/Exception.h>
#include <frameobject.h>
#include <torch/csrc/Generator.h>
#include <torch/csrc/autograd/python_variable.h>

#include "aten/boxed_compute.h"
#include "aten/compute_allocator.h"
#include "aten/compute_scope.h"
#include "aten/cpu_fallback.h"
#include "aten/diagnostics.h"
#include "aten/op_registry.h"
#include "aten/vendor_call.h"
#include "python/cuda_alias.h"
#include "python/memory_bindings.h"
#include "python/settings_bindings.h"
#include "python/python_threads.h"
#include "runtime/allocator.h"
#include "runtime/device.h"
#include "runtime/exception.h"
#include "runtime/fork.h"
#include "runtime/generator.h"
#include "runtime/log.h"
#include "runtime/mem_check.h"
#include "runtime/python_hooks.h"
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

// Real locations of library code (torch_devx._frames.LIBRARY_DIRS), each ending in a separator.
// Set once at import, before any op can be diagnosed; read without a lock afterwards.
std::vector<std::string>& library_dirs() {
  static auto* dirs = new std::vector<std::string>();  // leaked: read by reports during teardown
  return *dirs;
}

// The same test as torch_devx._frames.is_library_file, for the file names Python keeps in code
// objects (absolute for every imported module and the main script).
bool is_library_file(const std::string& file) {
  if (file.rfind("<frozen ", 0) == 0 || file.rfind("<built-in", 0) == 0) return true;
  for (const std::string& dir : library_dirs()) {
    if (file.compare(0, dir.size(), dir) == 0) return true;
  }
  return false;
}

// What python_site() knows of a code object: whether it is library code and its file name. The
// cache holds a reference to each code object, so that a pointer is never reused by another, and is
// read and written under the GIL only.
struct CodeInfo {
  bool library;
  std::string file;
};

const CodeInfo& code_info(PyCodeObject* code) {
  static auto* cache = new std::unordered_map<PyCodeObject*, CodeInfo>();  // leaked: used during teardown
  auto it = cache->find(code);
  if (it != cache->end()) return it->second;
  std::string file = py::cast<std::string>(py::handle(code->co_filename));
  const bool library = is_library_file(file);
  Py_INCREF(code);
  return cache->emplace(code, CodeInfo{library, std::move(file)}).first->second;
}

// The innermost frame of the user's code: where the user's program called the op being diagnosed
// (no file when no frame is the user's). Cheap enough for every op issued asynchronously: a code
// object's verdict and name are looked up once, and only the user's frame has its line computed.
devx::PythonSite python_site() {
  if (!devx::python::may_read_python_frames()) return {};
  py::gil_scoped_acquire gil;
  PyFrameObject* frame = PyEval_GetFrame();
  Py_XINCREF(frame);
  devx::PythonSite site;
  while (frame && site.file == nullptr) {
    PyCodeObject* code = PyFrame_GetCode(frame);
    const CodeInfo& info = code_info(code);
    Py_DECREF(code);
    if (!info.library) site = {&info.file, PyFrame_GetLineNumber(frame)};
    PyFrameObject* back = PyFrame_GetBack(frame);
    Py_DECREF(frame);
    frame = back;
  }
  Py_XDECREF(frame);
  return site;
}

// torch_devx._frames.module_path() for the calling thread; "" where Python cannot be asked.
std::string python_module_path() {
  if (!devx::python::may_read_python_frames()) return "";
  py::gil_scoped_acquire gil;
  try {
    return py::cast<std::string>(py::module_::import("torch_devx._frames").attr("module_path")());
  } catch (py::error_already_set& e) {
    e.discard_as_unraisable("torch_devx._frames.module_path");
    return "";
  }
}

// "file.py:42" of python_site(), "" when no frame is the user's.
std::string python_location() {
  return python_site().str();
}

std::string python_stack() {
  if (!devx::python::may_read_python_frames()) return "";
  py::gil_scoped_acquire gil;
  py::list frames = py::module_::import("traceback").attr("format_stack")();
  std::string out;
  for (const auto& f : frames) out += "      " + py::cast<std::string>(f);
  return out;
}

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

// Runs the Python function overriding `op`: arguments off the stack, its result(s) back on.
py::dict& overrides() {
  static py::dict* d = new py::dict();  // leaked: outlives the interpreter's teardown order
  return *d;
}

void run_override(const std::string& op, const c10::OperatorHandle& handle, torch::jit::Stack* stack) {
  TORCH_CHECK(devx::python::may_call_python(), "devx: ", op,
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

void init(const std::vector<std::string>& vendor_paths, bool requested) {
  devx::log::reload();
  devx::load_vendor(vendor_paths, requested);
  devx::check_allocator_settings();
  devx::install_allocator_settings_hook();
  devx::install_compute_routing(devx::vendor().compute_device_type);
  devx::init_kernel_table();
  devx::register_long_tail();
  devx::set_python_hooks(&python_location, &python_stack);
  devx::set_python_site_hook(&python_site);
  devx::set_python_module_hook(&python_module_path);
  devx::trace::reload();
  devx::diag::set_override_runner(&run_override);
  devx::sanitizer::set_host_access_notifier(&schedule_host_access_report);
  devx::diag::refresh();
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
  m.def("_set_library_dirs", [](std::vector<std::string> dirs) { library_dirs() = std::move(dirs); },
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
  m.def("_time_wrapper_pair_ns", [](const std::string& op, const at::Tensor& a, const at::Tensor& b,
                                    int iterations, int rounds) {
    // Benchmark hook: one call of a generated wrapper, with the diagnostics gate and with it
    // compiled out, alternating rounds so that both see the same machine; minimum per-call ns.
    py::gil_scoped_release no_gil;
    const devx::WrapperPair pair = devx::bench_wrappers(op);
    const c10::DispatchKeySet ks(c10::DispatchKey::PrivateUse1);
    const c10::Scalar alpha(1);
    auto time = [&](devx::BinaryWrapper fn) {
      auto start = std::chrono::steady_clock::now();
      for (int i = 0; i < iterations; ++i) fn(ks, a, b, alpha);
      return std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start).count() / iterations;
    };
    double with = 1e300, without = 1e300;
    for (int r = 0; r < rounds; ++r) {
      with = std::min(with, time(pair.with_diagnostics));
      without = std::min(without, time(pair.without_diagnostics));
    }
    return std::make_pair(with, without);
  });
  m.def("_time_alloc_free_ns", [](int device, size_t nbytes, int iterations) {
    // Benchmark hook: the cost of one cached allocate/free pair, without Python in the loop.
    py::gil_scoped_release no_gil;
    auto* alloc = devx::devx_allocator();
    alloc->allocate_on(static_cast<c10::DeviceIndex>(device), nbytes, devx::devx_device(device));  // warm the cache
    auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < iterations; ++i) {
      c10::DataPtr p = alloc->allocate_on(static_cast<c10::DeviceIndex>(device), nbytes, devx::devx_device(device));
    }
    auto ns = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start).count();
    return ns / iterations;
  });
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
          (*callback)(op, to_python_tuple(args), to_python_tuple(results));
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
  m.def("_set_override", [](const std::string& op, py::object fn) {
    if (fn.is_none()) {
      if (overrides().contains(op)) overrides().attr("pop")(op);
      devx::diag::set_override(op, false);
    } else {
      overrides()[py::str(op)] = fn;
      devx::diag::set_override(op, true);
    }
  });
  m.def("_overridden_ops", [] { return py::list(overrides().attr("keys")()); },
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
  m.def("_in_bad_fork", &devx::in_bad_fork);
  m.def("_hold_stream", [](int64_t device, int64_t stream_id) {
    return devx::hold_stream(devx::DevxStream(
        c10::Stream(c10::Stream::UNSAFE, devx::devx_device(devx::device_index_arg(device)), stream_id)));
  });
  m.def("_release_stream", &devx::release_stream);
}
