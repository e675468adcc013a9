// DIPU_DUMP_OP_ARGS: 1 op and kernel name per call, with the user's Python line that issued it;
// 2 plus every argument's metadata (sizes, strides, dtype, device, storage offset, is_view, data
// pointer, scalars) and the results'; 3 plus tensor values: all of them up to
// DEVX_DUMP_OP_ARGS_MAX_ELEMENTS, beyond it the first and last elements and statistics (min, max,
// mean, nan and inf counts) of all of them.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>

#include <cstdint>

namespace devx::diag {

struct DumpStyle {
  int level = 0;
  int64_t max_elements = 16;
};

// `site` is where the user's program issued the op ("train.py:42"), "" when unknown.
void dump_args(const c10::OperatorHandle& op, const torch::jit::Stack& stack, const DumpStyle& style,
               const char* kernel, const std::string& site);
void dump_results(const c10::OperatorHandle& op, const torch::jit::Stack& stack, const DumpStyle& style);
// One line per tensor-holding value (values on lines of their own at level 3).
std::string describe(const c10::IValue& v, const DumpStyle& style);

}  // namespace devx::diag
