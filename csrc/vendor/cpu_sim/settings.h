// The simulator's knobs, read from the environment once, by init().
#pragma once

#include <cstddef>
#include <regex>
#include <vector>

#include "runtime/vendor_api.h"

namespace devx::cpu_sim {

struct Settings {
  int devices = 2;                   // DEVX_SIM_DEVICES: 2, so multi-device code is exercised
  size_t memory = size_t{16} << 30;  // DEVX_SIM_MEMORY: the capacity of each device
  bool async = false;                // DEVX_SIM_ASYNC: a worker thread per stream
  // DEVX_SIM_UNSUPPORTED_OPS: comma-separated regexes of ops the simulated hardware lacks (matched
  // against "add.out" and "add"), to rehearse a vendor with an incomplete kernel library.
  std::vector<std::regex> unsupported_ops;
  // DEVX_SIM_VENDOR_KERNELS: offer cpu_sim's own kernels (kernels.cpp) instead of ATen's for the
  // ops it has them for, to exercise the path of a vendor that brings its own kernels.
  bool vendor_kernels = false;
};

constexpr int kMaxDevices = 64;

// Fills `out` from DEVX_SIM_*; unset or empty variables keep their defaults. A bad value gives
// DEVX_ERROR_INVALID with a last_error naming the variable, the value and what is accepted.
DevxStatus read_settings(Settings* out);

}  // namespace devx::cpu_sim
