// torch_devx_bench: what bench/ times in C++, with no Python in the loop. Not part of the
// product: built on demand by bench/_ext.py against libdevx_core.
#include <algorithm>
#include <chrono>

#include <torch/csrc/utils/pybind.h>

#include "bench_wrappers.h"
#include "runtime/allocator.h"
#include "runtime/device.h"

namespace py = pybind11;

namespace {

const devx::bench::WrapperPair& wrapper_pair(const std::string& op) {
  for (const devx::bench::WrapperPair* p = devx::bench::kWrapperPairs; p->op; ++p) {
    if (op == p->op) return *p;
  }
  throw py::value_error("no benchmark wrapper pair for '" + op + "'");
}

// One call of a generated wrapper with the diagnostics gate and with it compiled out, alternating
// rounds so that both see the same machine; minimum ns per call of each.
std::pair<double, double> time_wrapper_pair_ns(const std::string& op, const at::Tensor& a, const at::Tensor& b,
                                               int iterations, int rounds) {
  const devx::bench::WrapperPair& pair = wrapper_pair(op);
  py::gil_scoped_release no_gil;
  const c10::DispatchKeySet ks(c10::DispatchKey::PrivateUse1);
  const c10::Scalar alpha(1);
  auto time = [&](devx::bench::BinaryWrapper fn) {
    auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < iterations; ++i) fn(ks, a, b, alpha);
    return std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start).count() / iterations;
  };
  double with = 1e300, without = 1e300;
  for (int r = 0; r < rounds; ++r) {
    with = std::min(with, time(pair.with_diagnostics));
    without = std::min(without, time(pair.without_diagnostics));
  }
  return {with, without};
}

// The cost of one cached allocate/free pair of the devx allocator.
double time_alloc_free_ns(int device, size_t nbytes, int iterations) {
  const c10::DeviceIndex index = devx::device_index_arg(device);
  py::gil_scoped_release no_gil;
  auto* alloc = devx::devx_allocator();
  alloc->allocate_on(index, nbytes, devx::devx_device(index));  // warm the cache
  auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < iterations; ++i) {
    c10::DataPtr p = alloc->allocate_on(index, nbytes, devx::devx_device(index));
  }
  return std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start).count() / iterations;
}

}  // namespace

PYBIND11_MODULE(torch_devx_bench, m) {
  m.def("time_wrapper_pair_ns", &time_wrapper_pair_ns, py::arg("op"), py::arg("a"), py::arg("b"),
        py::arg("iterations"), py::arg("rounds"));
  m.def("time_alloc_free_ns", &time_alloc_free_ns, py::arg("device"), py::arg("nbytes"), py::arg("iterations"));
}
