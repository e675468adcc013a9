// Sparse (COO and compressed), nested and quantized tensors on devx: their ops run the compute
// device's kernels for that kind (SparseCPU, SparseCsrCPU, NestedTensorCPU, QuantizedCPU on cpu_sim) on aliases, as the
// dense long tail does (boxed_compute.h). A devx sparse or nested tensor is re-expressed as a
// compute-device tensor of the same layout whose member tensors (indices, values, the nested
// buffer, a quantized tensor's bytes) alias the devx ones; results of those kinds come back as devx
// tensors whose members are the devx tensors over the same bytes. The dense ops that turn a devx
// tensor into one of them (`_to_sparse`, `_nested_tensor_from_mask`, `quantize_per_tensor`) run the same way.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>

#include <string>
#include <vector>

namespace devx {

void layout_compute(const c10::OperatorHandle& op, c10::DispatchKeySet ks, torch::jit::Stack* stack);

// Registers layout_compute for every op the compute device has a sparse, sparse-compressed,
// nested or quantized kernel for (and the dense ops that make those layouts), plus PyTorch's device-generic
// kernels for the copies between devices. Called once the vendor is known, after the long tail.
void register_layout_kernels();

// Names ("Sparse:add.out", "NestedTensor:relu") of the ops registered to layout_compute.
const std::vector<std::string>& layout_ops();

}  // namespace devx
