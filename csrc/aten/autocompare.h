// Autocompare: an op also runs on CPU copies of its inputs, and its results, the arguments it
// writes and the arguments it must leave alone are compared with the CPU's, per-dtype tolerances
// as torch.testing uses them. One line per check, in the style of DIPU
// ("autocompare: add.out out: allclose" / "not_close, max diff ...").
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>

#include <functional>
#include <string>
#include <vector>

namespace devx::diag {

// False for ops whose results cannot match a second run: random ops and uninitialised memory.
bool comparable(const c10::OperatorHandle& op);

class CpuReplay {
 public:
  // Copies the op's arguments (the top of `stack`) to the CPU, before the op runs.
  CpuReplay(const c10::OperatorHandle& op, const torch::jit::Stack& stack);
  // After the op ran on devx (`stack` holds its results): runs it on the copies and compares.
  // With `raise`, a mismatch is an exception naming the op, its arguments and `where()`.
  void compare(const torch::jit::Stack& stack, bool raise, const std::function<std::string()>& where);

 private:
  const c10::OperatorHandle& op_;
  std::vector<c10::IValue> devx_args_;
  std::vector<c10::IValue> cpu_args_;
};

}  // namespace devx::diag
