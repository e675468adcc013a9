// Factories and storage manipulation: devx tensors own devx-allocator memory.
#include <ATen/EmptyTensor.h>
#include <ATen/native/Resize.h>

#include "aten/tensor_ops.h"
#include "runtime/allocator.h"
#include "runtime/device.h"

namespace devx::ops {

namespace {

const c10::DispatchKeySet kDevxKeys(c10::DispatchKey::PrivateUse1);

void check_factory_args(std::optional<c10::Layout> layout, std::optional<bool> pin_memory) {
  TORCH_CHECK(!layout || *layout == c10::Layout::Strided, "devx: only strided tensors are supported, got layout ",
              *layout);
  TORCH_CHECK(!pin_memory || !*pin_memory, "devx: only CPU tensors can be pinned, not devx tensors");
}

}  // namespace

at::Tensor empty_memory_format(c10::IntArrayRef size, std::optional<c10::ScalarType> dtype,
                               std::optional<c10::Layout> layout, std::optional<c10::Device> device,
                               std::optional<bool> pin_memory, std::optional<c10::MemoryFormat> memory_format) {
  check_factory_args(layout, pin_memory);
  DevxGuard guard(device);
  return at::detail::empty_generic(size, devx_allocator(), kDevxKeys, c10::dtype_or_default(dtype), memory_format);
}

at::Tensor empty_strided(c10::IntArrayRef size, c10::IntArrayRef stride, std::optional<c10::ScalarType> dtype,
                         std::optional<c10::Layout> layout, std::optional<c10::Device> device,
                         std::optional<bool> pin_memory) {
  check_factory_args(layout, pin_memory);
  DevxGuard guard(device);
  return at::detail::empty_strided_generic(size, stride, devx_allocator(), kDevxKeys, c10::dtype_or_default(dtype));
}

// A ZeroTensor has sizes but no bytes: the ZeroTensor key answers for its (zero) values.
at::Tensor efficientzerotensor(c10::IntArrayRef size, std::optional<c10::ScalarType> dtype,
                              std::optional<c10::Layout> layout, std::optional<c10::Device> device,
                              std::optional<bool> pin_memory) {
  check_factory_args(layout, pin_memory);
  DevxGuard guard(device);
  // The storage keeps its allocator, so this one must outlive every ZeroTensor.
  struct NoBytes final : c10::Allocator {
    c10::DataPtr allocate(size_t) override { return {nullptr, devx_device(current_device())}; }
    void copy_data(void*, const void*, std::size_t) const override {}
  };
  static NoBytes no_bytes;
  auto keys = kDevxKeys | c10::DispatchKeySet(c10::DispatchKey::ZeroTensor);
  return at::detail::empty_generic(size, &no_bytes, keys, c10::dtype_or_default(dtype), std::nullopt);
}

const at::Tensor& resize_(const at::Tensor& self, c10::IntArrayRef size, std::optional<c10::MemoryFormat> memory_format) {
  DevxGuard guard(self.device());
  c10::TensorImpl* impl = self.unsafeGetTensorImpl();
  if (impl->sizes() == size && !memory_format) return self;
  impl->set_sizes_contiguous(size);
  size_t needed = at::detail::computeStorageNbytesContiguous(size, self.dtype().itemsize(), impl->storage_offset());
  c10::StorageImpl* storage = impl->storage().unsafeGetStorageImpl();
  if (needed > storage->nbytes()) resize_storage_bytes(storage, needed);
  if (memory_format) impl->empty_tensor_restride(*memory_format);
  return self;
}

at::Tensor& set_storage(at::Tensor& self, c10::Storage source, int64_t storage_offset, c10::IntArrayRef size,
                        c10::IntArrayRef stride) {
  TORCH_CHECK(!source.data() || source.device().type() == kDevx, "devx: set_ expected a devx storage, got one on ",
              source.device());
  TORCH_CHECK(stride.empty() || stride.size() == size.size(), "devx: set_: ", size.size(), " sizes but ",
              stride.size(), " strides");
  TORCH_CHECK(storage_offset >= 0, "devx: set_: negative storage offset ", storage_offset);
  c10::TensorImpl* impl = self.unsafeGetTensorImpl();
  if (!impl->storage().is_alias_of(source)) impl->set_storage_keep_dtype(std::move(source));
  impl->set_storage_offset(storage_offset);
  if (stride.empty()) {
    impl->set_sizes_contiguous(size);
  } else {
    impl->set_sizes_and_strides(size, stride);
  }
  size_t needed = at::detail::computeStorageNbytes(impl->sizes(), impl->strides(), self.dtype().itemsize(), storage_offset);
  c10::StorageImpl* storage = impl->storage().unsafeGetStorageImpl();
  if (needed > storage->nbytes()) resize_storage_bytes(storage, needed);
  return self;
}

at::Tensor& set_source_storage(at::Tensor& self, c10::Storage source) {
  int64_t numel = static_cast<int64_t>(source.nbytes() / self.dtype().itemsize());
  return set_storage(self, std::move(source), 0, {numel}, {});
}

at::Tensor& set_source_tensor(at::Tensor& self, const at::Tensor& source) {
  TORCH_CHECK(source.device().type() == kDevx, "devx: set_ expected a devx source tensor, got one on ", source.device());
  if (self.is_same(source)) return self;
  return set_storage(self, source.storage(), source.storage_offset(), source.sizes(), source.strides());
}

at::Tensor& set_empty(at::Tensor& self) {
  DevxGuard guard(self.device());
  c10::Storage empty(c10::Storage::use_byte_size_t(), 0, devx_allocator()->allocate(0), devx_allocator(), true);
  return set_storage(self, std::move(empty), 0, {0}, {});
}

void record_stream(at::Tensor& self, c10::Stream stream) {
  TORCH_CHECK(stream.device_type() == kDevx, "devx: record_stream expects a devx stream, got a ",
              stream.device_type(), " stream");
  devx_allocator()->recordStream(self.storage().data_ptr(), stream);
}

}  // namespace devx::ops
