// Pinned (page-locked) host memory from the vendor: what pin_memory(), is_pinned() and
// non_blocking copies to the CPU use. Freed blocks are cached by size, as CUDA's host allocator
// does, because page-locking is expensive on real hardware.
#pragma once

#include <c10/core/Allocator.h>

namespace devx {

c10::Allocator* pinned_allocator();
bool is_pinned_ptr(const void* ptr);
// Frees every cached pinned block.
void empty_pinned_cache();

}  // namespace devx
