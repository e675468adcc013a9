// The simulator's knobs, read from the environment once, by init().
#pragma once

#include <cstddef>
#include <regex>
#include <vector>

#include "faults.h"
#include "runtime/vendor_api.h"

namespace devx::cpu_sim {

struct Settings {
  int devices = 2;                   // DEVX_SIM_DEVICES: 2, so multi-device code is exercised
  size_t memory = size_t{16} << 30;  // DEVX_SIM_MEMORY: the capacity of each device
  bool async = false;                // DEVX_SIM_ASYNC: a worker thread per stream
  // DEVX_SIM_UNSUPPORTED_OPS: comma-separated regexes of ops the simulated hardware lacks (matched
  // against "add.out" and "add"), to rehearse a vendor with an incomplete kernel library.
  std::vector<std::regex> unsupported_ops;
  // DEVX_SIM_KERNELS: what ops compute with. kAten: ATen's CPU kernels on aliases of the arena;
  // kOwn: cpu_sim's own kernel library (kernels/) first, ATen's for the rest; kOwnOnly: its own
  // kernels and nothing of ATen (what they lack goes to the core's CPU fallback), the rehearsal
  // of a young accelerator.
  enum class Kernels { kAten, kOwn, kOwnOnly };
  Kernels kernels = Kernels::kAten;
  // DEVX_SIM_FAULTY_KERNELS: comma-separated regexes of own kernels ("sum.IntList_out") offered in a
  // deliberately wrong form (the last element of their first output off by one), to rehearse
  // finding a wrong vendor kernel with autocompare, vendor-test and the divergence finder.
  std::vector<std::regex> faulty_kernels;
  // DEVX_SIM_THREADS: threads of the own kernels' pool (0: the machine's cores).
  int threads = 0;
  // DEVX_SIM_FAULTS: vendor calls that fail on purpose (faults.h).
  FaultRules faults{};
};

constexpr int kMaxDevices = 64;

// Fills `out` from DEVX_SIM_*; unset or empty variables keep their defaults. A bad value gives
// DEVX_ERROR_INVALID with a last_error naming the variable, the value and what is accepted.
DevxStatus read_settings(Settings* out);

}  // namespace devx::cpu_sim
