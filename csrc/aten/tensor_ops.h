// Hand-written devx kernels: the ops every backend must provide itself (factories, views,
// storage manipulation, copies, host reads). Registered in register_minimal.cpp.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/DispatchKeySet.h>

namespace devx::ops {

at::Tensor empty_memory_format(c10::IntArrayRef size, std::optional<c10::ScalarType> dtype,
                               std::optional<c10::Layout> layout, std::optional<c10::Device> device,
                               std::optional<bool> pin_memory, std::optional<c10::MemoryFormat> memory_format);
at::Tensor empty_strided(c10::IntArrayRef size, c10::IntArrayRef stride, std::optional<c10::ScalarType> dtype,
                         std::optional<c10::Layout> layout, std::optional<c10::Device> device,
                         std::optional<bool> pin_memory);
at::Tensor efficientzerotensor(c10::IntArrayRef size, std::optional<c10::ScalarType> dtype,
                              std::optional<c10::Layout> layout, std::optional<c10::Device> device,
                              std::optional<bool> pin_memory);
at::Tensor as_strided(const at::Tensor& self, c10::IntArrayRef size, c10::IntArrayRef stride,
                      std::optional<int64_t> storage_offset);
at::Tensor view(const at::Tensor& self, c10::IntArrayRef size);
at::Tensor reshape_alias(const at::Tensor& self, c10::IntArrayRef size, c10::IntArrayRef stride);
const at::Tensor& resize_(const at::Tensor& self, c10::IntArrayRef size, std::optional<c10::MemoryFormat> memory_format);
at::Tensor& set_storage(at::Tensor& self, c10::Storage source, int64_t storage_offset, c10::IntArrayRef size,
                        c10::IntArrayRef stride);
at::Tensor& set_source_storage(at::Tensor& self, c10::Storage source);
at::Tensor& set_source_tensor(at::Tensor& self, const at::Tensor& source);
at::Tensor& set_empty(at::Tensor& self);
bool has_compatible_shallow_copy_type(const at::Tensor& self, const at::Tensor& from);

at::Tensor copy_from(const at::Tensor& self, const at::Tensor& dst, bool non_blocking);
// copy_ itself is ATen's (CompositeExplicitAutograd, which calls _copy_from); devx registers it so
// that copies (.to(), .cpu(), clone(), casts) pass the diagnostics like every other op.
at::Tensor& copy_diagnosed(c10::DispatchKeySet ks, at::Tensor& self, const at::Tensor& src, bool non_blocking);
at::Tensor copy_from_and_resize(const at::Tensor& self, const at::Tensor& dst);
c10::Scalar local_scalar_dense(const at::Tensor& self);
void record_stream(at::Tensor& self, c10::Stream stream);

}  // namespace devx::ops
