// The op table at run time: for every generated op, which kernel the loaded vendor runs.
#pragma once

#include <ATen/core/boxing/BoxedKernel.h>
#include <ATen/core/dispatch/Dispatcher.h>

#include <string>

#include "op_table.h"

namespace devx {

struct OpName {
  const char* name;      // "aten::add"
  const char* overload;  // "Tensor" ("" for the default overload)
};

extern const OpName kOpNames[gen::kNumOps];  // generated
// Filled by the generated shards at static-initialisation time: the "ATen kernel of the compute
// device on aliases" implementation of each op.
extern void* g_compute_kernels[gen::kNumOps];
// What each generated wrapper calls: the vendor's own kernel, else the compute kernel when the
// compute device has a kernel for the op, else nullptr (the wrapper then takes the CPU fallback).
extern void* g_kernels[gen::kNumOps];

enum class KernelSource { kVendor, kCompute, kFallback };

// Whether the loaded vendor lets its compute device run `op` ("add.out"); see op_supported.
bool vendor_supports(const std::string& op);

// Fills g_kernels for the loaded vendor; run once after the vendor is loaded.
void init_kernel_table();
KernelSource kernel_source(int op);

const c10::OperatorHandle& op_handle(int op);
// "add.Tensor" style name of a generated op.
std::string op_overload_name(int op);
// Index of `name` in the generated table, -1 if it has no generated wrapper.
int op_index(const c10::OperatorName& name);

// The boxed CPU fallback, as a kernel the generated wrappers can call with unboxed arguments.
const c10::BoxedKernel& fallback_kernel();

}  // namespace devx
