// Bindings of the devx process group: the class, as a subclass of torch's c10d Backend type, so
// that torch.distributed can register it for the devx device.
#include <pybind11/chrono.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <torch/csrc/distributed/c10d/Backend.hpp>

#include "distributed/process_group_devx.h"

namespace py = pybind11;

namespace {

// The pybind holder of the devx process group. It drops its reference with the GIL released:
// the last reference tears down the engine, whose threads may be waiting for the GIL to run a
// Python callback. Its layout (one intrusive_ptr) is that of torch's own Backend holder, which is
// how torch's bindings read a Backend subclass registered by another module.
template <typename T>
class ReleasesGilPtr {
 public:
  ReleasesGilPtr() = default;
  explicit ReleasesGilPtr(T* p) : ptr_(c10::intrusive_ptr<T>::unsafe_reclaim_from_nonowning(p)) {}
  explicit ReleasesGilPtr(c10::intrusive_ptr<T> p) : ptr_(std::move(p)) {}
  ReleasesGilPtr(const ReleasesGilPtr&) = default;
  ReleasesGilPtr(ReleasesGilPtr&&) = default;
  ReleasesGilPtr& operator=(const ReleasesGilPtr&) = default;
  ReleasesGilPtr& operator=(ReleasesGilPtr&&) = default;
  ~ReleasesGilPtr() {
    if (ptr_ && PyGILState_Check()) {
      py::gil_scoped_release no_gil;
      ptr_.reset();
    }
  }
  T* get() const { return ptr_.get(); }

 private:
  c10::intrusive_ptr<T> ptr_;
};

// The C++ object behind a torch Backend (ProcessGroupGloo, ProcessGroupNCCL) made in Python.
c10::intrusive_ptr<c10d::Backend> backend_of(const py::handle& obj, const char* role) {
  auto* raw = obj.cast<c10d::Backend*>();
  TORCH_CHECK_VALUE(raw != nullptr, "devx process group: the ", role, " engine is None");
  return c10::intrusive_ptr<c10d::Backend>::unsafe_reclaim_from_nonowning(raw);
}

}  // namespace

PYBIND11_DECLARE_HOLDER_TYPE(T, ReleasesGilPtr<T>, true)

void bind_distributed(py::module_& m) {
  m.def("_wait_for_settle_threads", &devx::dist::wait_for_settle_threads, py::call_guard<py::gil_scoped_release>(),
        "Waits until no devx process group is settling a call on a thread of its own");
  py::object backend_type = py::module_::import("torch._C._distributed_c10d").attr("Backend");
  py::class_<devx::dist::ProcessGroupDevx, ReleasesGilPtr<devx::dist::ProcessGroupDevx>>(m, "ProcessGroupDevx",
                                                                                           backend_type)
      .def(py::init([](const py::object& engine, const py::object& host_engine, const std::string& engine_name,
                       bool check_calls) {
             return ReleasesGilPtr<devx::dist::ProcessGroupDevx>(c10::make_intrusive<devx::dist::ProcessGroupDevx>(
                 backend_of(engine, "device"), backend_of(host_engine, "host"), engine_name, check_calls));
           }),
           py::arg("engine"), py::arg("host_engine"), py::arg("engine_name"), py::arg("check_calls"))
      .def_property_readonly("engine_name", &devx::dist::ProcessGroupDevx::engine_name)
      .def_property_readonly("call_check_counts", [](const devx::dist::ProcessGroupDevx& pg) {
        const devx::dist::CallCheckCounts c = pg.call_check_counts();
        py::dict d;
        d["check_rounds"] = c.check_rounds;
        d["predicted"] = c.predicted;
        d["confirmations"] = c.confirmations;
        return d;
      });
}
