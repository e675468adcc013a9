// Adapters between aten ops and a vendor's own kernels (vendor_api.h, DevxVendorKernel): for each
// op the core knows a C signature for, an unboxed aten kernel that builds the descriptors, calls
// the vendor on the current devx stream, and, when the vendor declines the case, runs what would
// have run without it.
#pragma once

namespace devx {

// The adapter for vendor kernel `fn` of generated op `op` (index in the op table), to install as
// the op's kernel, or nullptr if the core has no adapter for that op. `otherwise` is the op's
// kernel without the vendor's (the compute device's ATen kernel), nullptr for the CPU fallback.
void* adapt_vendor_kernel(int op, void* fn, void* otherwise);

}  // namespace devx
