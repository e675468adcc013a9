// The boxed CPU fallback: what runs an op the vendor has no kernel for (or that the user forced
// off the device): devx arguments are copied to the CPU, the CPU kernel runs, mutated arguments
// are copied back and results are copied to the device. View ops (a result aliases an input
// without writing it) compute metadata only, so they run on aliases instead of copies — a copy
// would break the aliasing. Every call is counted per op.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>

#include <map>
#include <string>

namespace devx {

void cpu_fallback(const c10::OperatorHandle& op, c10::DispatchKeySet ks, torch::jit::Stack* stack);

// The op that computes `op` on the CPU, adapting `stack` if its arguments differ. PyTorch routes
// PrivateUse1 convolutions to the *_overrideable ops, which have no CPU kernel: their CPU form is
// the plain convolution op (the backward also wants the bias sizes).
const c10::OperatorHandle* cpu_form(const c10::OperatorHandle& op, torch::jit::Stack* stack);

// Calls per op ("add.out" -> n) since start or the last reset.
std::map<std::string, int64_t> fallback_stats();
void reset_fallback_stats();

}  // namespace devx
