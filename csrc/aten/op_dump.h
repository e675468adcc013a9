// DIPU_DUMP_OP_ARGS: 1 op and kernel name per call; 2 plus every argument's metadata (sizes,
// strides, dtype, device, storage offset, is_view, data pointer, scalars) and the results'; 3 plus
// tensor values.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>

namespace devx::diag {

void dump_args(const c10::OperatorHandle& op, const torch::jit::Stack& stack, int level, const char* kernel);
void dump_results(const c10::OperatorHandle& op, const torch::jit::Stack& stack, int level);
// One line per tensor-holding value: what dumps and autocompare reports print.
std::string describe(const c10::IValue& v, int level);

}  // namespace devx::diag
