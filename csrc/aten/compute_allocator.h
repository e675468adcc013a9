// The compute device's own allocations, as devx memory.
//
// On a compute device other than the CPU (cuda), ATen's kernels allocate their results and
// workspaces with that device's allocator, which torch lets a process replace by two functions
// (CUDA's pluggable allocator). torch_devx installs devx_compute_malloc/devx_compute_free there
// (torch_devx/_compute_allocator.py), so those bytes come from the devx caching allocator, and a
// kernel's fresh result is adopted as a devx storage instead of being copied into one.
#pragma once

#include <c10/core/StorageImpl.h>

#include <cstddef>

extern "C" {
// The pluggable allocator's signatures: void* (size_t, int, stream), void (void*, size_t, int, stream).
__attribute__((visibility("default"))) void* devx_compute_malloc(size_t size, int device, void* stream);
__attribute__((visibility("default"))) void devx_compute_free(void* ptr, size_t size, int device, void* stream);
}

namespace devx {

// Called once the functions above are the compute device's allocator.
void set_compute_allocations_routed();
bool compute_allocations_routed();

// Before each op on a routed compute device: cuDNN's benchmark mode sizes its workspaces by asking
// CUDA's allocator for its largest free block (cacheInfo), which torch's pluggable allocator does
// not answer, so a convolution would fail. The mode is turned off, with a warning, instead.
void keep_compute_settings_supported();

// When `s` holds bytes its allocator got from devx_compute_malloc, hands them to a devx DataPtr on
// the same storage (the compute allocator's own record of them is released without freeing them)
// and returns true; otherwise leaves `s` alone and returns false.
bool adopt_compute_allocation(c10::StorageImpl* s);

}  // namespace devx
