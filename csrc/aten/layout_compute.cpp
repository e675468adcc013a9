#include "aten/layout_compute.h"

#include <ATen/NestedTensorImpl.h>
#include <ATen/SparseCsrTensorImpl.h>
#include <ATen/SparseTensorImpl.h>
#include <ATen/ops/_sparse_compressed_tensor_unsafe_native.h>
#include <ATen/ops/_sparse_coo_tensor_with_dims_and_tensors_native.h>
#include <ATen/quantized/QTensorImpl.h>
#include <ATen/quantized/Quantizer.h>

#include "aten/async_ops.h"
#include "aten/compute_scope.h"
#include "aten/stack_util.h"
#include "runtime/allocator.h"
#include "runtime/device.h"
#include "runtime/stream.h"
#include "runtime/vendor.h"

namespace devx {

namespace {

bool is_compressed(const at::Tensor& t) {
  const c10::Layout l = t.layout();
  return l == c10::kSparseCsr || l == c10::kSparseCsc || l == c10::kSparseBsr || l == c10::kSparseBsc;
}

at::SparseTensorImpl* sparse_impl(const at::Tensor& t) {
  return static_cast<at::SparseTensorImpl*>(t.unsafeGetTensorImpl());
}

bool is_plain(const at::Tensor& t) {
  return t.layout() == c10::kStrided && !t.is_nested() && !t.is_quantized();
}

// A quantized tensor of the same bytes, geometry and quantizer as `t`, over `bytes`' storage.
at::Tensor quantized_over(const at::Tensor& bytes, const at::Tensor& t, c10::DispatchKey key) {
  auto q = at::detail::make_tensor<at::QTensorImpl>(c10::Storage(bytes.storage()), c10::DispatchKeySet(key), t.dtype(),
                                                    at::get_qtensorimpl(t)->quantizer());
  q.unsafeGetTensorImpl()->set_sizes_and_strides(t.sizes(), t.strides(), t.storage_offset());
  return q;
}

// Ops on nested tensors take and return their metadata (sizes, strides, offsets) as CPU tensors,
// on every device.
bool takes_host_metadata(const c10::OperatorHandle& op) {
  return op.operator_name().name.rfind("aten::_nested", 0) == 0;
}

bool returns_host_metadata(const c10::OperatorHandle& op) {
  const std::string& name = op.operator_name().name;
  return name == "aten::_nested_tensor_size" || name == "aten::_nested_tensor_strides" ||
         name == "aten::_nested_tensor_storage_offsets";
}

// A CPU tensor a kernel allocated while the scope routed CPU allocations to devx memory, moved to
// host memory (nested metadata must be host tensors in host memory).
at::Tensor to_host_memory(const at::Tensor& t) {
  if (!t.defined() || t.device().type() != c10::kCPU || !t.has_storage() ||
      !is_devx_allocation(t.storage().data_ptr())) {
    return t;
  }
  return t.clone();
}

// A nested result whose devx buffer is known but whose metadata must leave the scope first.
struct PendingNested {
  size_t slot;
  at::Tensor buffer;
  at::Tensor sizes, strides, offsets;
};

// The per-call translation between devx tensors of any layout and compute-device tensors.
class LayoutAliases {
 public:
  LayoutAliases(const ComputeScope& scope, c10::DeviceIndex device) : scope_(scope), device_(device) {}

  at::Tensor in(const at::Tensor& t, bool host_ok) {
    if (!t.defined()) return t;
    if (t.device().type() != kDevx) {
      if (host_ok || (t.device().type() == c10::kCPU && t.dim() == 0 && is_plain(t))) return t;
      TORCH_CHECK(false, "Expected all tensors to be on the same device, but found at least two devices, ",
                  devx_device(device_), " and ", t.device(), "!");
    }
    if (is_plain(t)) return scope_.in(t);
    for (const auto& [devx, alias] : made_) {
      if (devx.is_same(t)) return alias;
    }
    TORCH_CHECK(t.device().index() == device_, "Expected all tensors to be on the same device, but found at least "
                "two devices, ", devx_device(device_), " and ", t.device(), "!");
    const c10::Device compute = scope_.device(t.device());
    at::Tensor alias;
    if (t.is_sparse()) {
      auto* impl = sparse_impl(t);
      alias = at::native::new_with_dims_and_tensor_sparse_symint(
          impl->sparse_dim(), impl->dense_dim(), t.sym_sizes(), scope_.in(impl->indices()), scope_.in(impl->values()),
          t.scalar_type(), c10::kSparse, compute, std::nullopt, impl->coalesced());
    } else if (is_compressed(t)) {
      auto* impl = static_cast<at::SparseCsrTensorImpl*>(t.unsafeGetTensorImpl());
      alias = at::native::_sparse_compressed_tensor_unsafe_symint(
          scope_.in(impl->compressed_indices()), scope_.in(impl->plain_indices()), scope_.in(impl->values()),
          t.sym_sizes(), t.scalar_type(), t.layout(), compute);
    } else if (t.is_quantized()) {
      alias = quantized_over(scope_.in(t), t, c10::toRuntimePerBackendFunctionalityKey(
                                                   c10::DispatchKey::Quantized, c10::toBackendComponent(compute_key())));
    } else {
      TORCH_CHECK(t.is_nested(), "devx: tensors of layout ", t.layout(), " are not supported");
      auto* impl = at::native::get_nested_tensor_impl(t);
      // The scope knows its aliases by TensorImpl address: the buffer must outlive it.
      buffers_.push_back(impl->get_unsafe_storage_as_tensor());
      alias = at::detail::make_tensor<at::native::NestedTensorImpl>(scope_.in(buffers_.back()),
                                                            impl->get_nested_sizes(), impl->get_nested_strides(),
                                                            impl->get_storage_offsets());
    }
    made_.emplace_back(t, alias);
    return alias;
  }

  // A result: dense ones map as in the long tail, sparse ones get devx members. Nested ones are
  // finished once the scope has closed (their metadata must leave devx memory).
  at::Tensor out(const at::Tensor& r, size_t slot) {
    if (!r.defined() || r.device() != scope_.device(devx_device(device_))) return r;
    if (is_plain(r)) return scope_.out(r);
    // An argument returned as it is (coalesce of a coalesced tensor) stays the caller's tensor.
    for (const auto& [devx, alias] : made_) {
      if (alias.is_same(r)) return devx;
    }
    if (r.is_sparse()) {
      auto* impl = sparse_impl(r);
      return at::native::new_with_dims_and_tensor_sparse_symint(
          impl->sparse_dim(), impl->dense_dim(), r.sym_sizes(), scope_.out(impl->indices()),
          scope_.out(impl->values()), r.scalar_type(), c10::kSparse, devx_device(device_), std::nullopt,
          impl->coalesced());
    }
    if (is_compressed(r)) {
      auto* impl = static_cast<at::SparseCsrTensorImpl*>(r.unsafeGetTensorImpl());
      return at::native::_sparse_compressed_tensor_unsafe_symint(
          scope_.out(impl->compressed_indices()), scope_.out(impl->plain_indices()), scope_.out(impl->values()),
          r.sym_sizes(), r.scalar_type(), r.layout(), devx_device(device_));
    }
    if (r.is_quantized()) return quantized_over(scope_.out(r), r, c10::DispatchKey::QuantizedPrivateUse1);
    TORCH_CHECK(r.is_nested(), "devx: results of layout ", r.layout(), " are not supported");
    auto* impl = at::native::get_nested_tensor_impl(r);
    pending_.push_back({slot, scope_.out(impl->get_unsafe_storage_as_tensor()), impl->get_nested_sizes(),
                        impl->get_nested_strides(), impl->get_storage_offsets()});
    return at::Tensor();
  }

  // A written argument: the kernel may have given a sparse alias new members or sizes.
  void sync_back(const at::Tensor& devx, const at::Tensor& alias) {
    if (!devx.defined() || devx.device().type() != kDevx) return;
    if (is_plain(devx)) {
      scope_.sync_back(devx, alias);
    } else if (devx.is_sparse()) {
      auto* d = sparse_impl(devx);
      auto* a = sparse_impl(alias);
      d->raw_resize_(a->sparse_dim(), a->dense_dim(), alias.sizes());
      d->set_indices_and_values_unsafe(scope_.out(a->indices()), scope_.out(a->values()));
      d->set_coalesced(a->coalesced());
    } else if (is_compressed(devx)) {
      auto* d = static_cast<at::SparseCsrTensorImpl*>(devx.unsafeGetTensorImpl());
      auto* a = static_cast<at::SparseCsrTensorImpl*>(alias.unsafeGetTensorImpl());
      d->set_member_tensors(scope_.out(a->compressed_indices()), scope_.out(a->plain_indices()),
                            scope_.out(a->values()), alias.sym_sizes());
    }
    // A nested tensor's in-place ops write its buffer through the alias and keep its metadata.
  }

  std::vector<PendingNested>& pending() { return pending_; }

 private:
  c10::DispatchKey compute_key() const { return scope_.keyset().highestPriorityTypeId(); }
  const ComputeScope& scope_;
  c10::DeviceIndex device_;
  // One alias per devx tensor, so that a kernel sees an argument passed twice as one tensor.
  std::vector<std::pair<at::Tensor, at::Tensor>> made_;
  std::vector<PendingNested> pending_;
  std::vector<at::Tensor> buffers_;
};

c10::DeviceIndex layout_device(const c10::OperatorHandle& op, const torch::jit::Stack& stack, size_t first) {
  const auto& schema = op.schema();
  if (!takes_host_metadata(op)) return device_of_args(schema, stack, first);
  std::optional<c10::DeviceIndex> found;
  for (size_t i = 0; i < schema.arguments().size() && !found; ++i) {
    const c10::IValue& v = stack[first + i];
    if (v.isDevice() && v.toDevice().type() == kDevx) found = v.toDevice().index();
    for_each_tensor(v, [&](const at::Tensor& t) {
      if (!found && t.defined() && t.device().type() == kDevx) found = t.device().index();
    });
  }
  return found.value_or(current_device());
}

struct InlineDepth {
  InlineDepth() { ++async::t_inline_depth; }
  ~InlineDepth() { --async::t_inline_depth; }
  InlineDepth(const InlineDepth&) = delete;
  InlineDepth& operator=(const InlineDepth&) = delete;
};

}  // namespace

void layout_compute(const c10::OperatorHandle& op, c10::DispatchKeySet ks, torch::jit::Stack* stack) {
  const auto& schema = op.schema();
  const size_t nargs = schema.arguments().size();
  const size_t first = stack->size() - nargs;
  const c10::DeviceIndex device = layout_device(op, *stack, first);
  DevxGuard guard(device);
  // These kernels read their inputs on the host (sparse and nested results have data-dependent
  // shapes): with asynchronous streams they wait for the stream, as a data-dependent op does.
  if (C10_UNLIKELY(g_async_host_streams) && async::issuing()) getCurrentDevxStream(device).synchronize();
  InlineDepth inline_depth;
  const bool host_ok = takes_host_metadata(op);
  const bool host_results = returns_host_metadata(op);
  // The compute device's kernel for the same functionality (SparseCPU for SparsePrivateUse1).
  const c10::DispatchKey functionality = c10::toFunctionalityKey(ks.highestPriorityTypeId());
  std::vector<PendingNested> pending;
  {
    ComputeScope scope;
    const c10::DispatchKeySet compute_ks(c10::toRuntimePerBackendFunctionalityKey(
        functionality, c10::toBackendComponent(scope.keyset().highestPriorityTypeId())));
    LayoutAliases aliases(scope, device);
    std::vector<std::pair<size_t, c10::IValue>> originals;
    std::vector<c10::IValue> written_aliases;
    for (size_t i = 0; i < nargs; ++i) {
      c10::IValue& v = (*stack)[first + i];
      const c10::Argument& arg = schema.arguments()[i];
      if (is_generator_arg(arg)) {
        std::optional<at::Generator> gen;
        if (v.isGenerator()) gen = v.toGenerator();
        v = c10::IValue(*scope.generator(gen));
        continue;
      }
      if (v.isDevice()) {
        TORCH_CHECK(v.toDevice().type() == kDevx, "devx: ", schema.operator_name(), " to ", v.toDevice(),
                    " of a devx tensor runs on the device it is given; move the tensor with .to() instead");
        v = c10::IValue(scope.device(v.toDevice()));
        continue;
      }
      const bool written = argument_written(schema, i);
      if (written) originals.emplace_back(i, v);
      map_tensors(v, [&](const at::Tensor& t) { return aliases.in(t, host_ok); });
      if (written) written_aliases.push_back(v);
    }
    redispatch_on_compute(op, compute_ks, stack);
    for (size_t k = 0; k < originals.size(); ++k) {
      const c10::IValue& original = originals[k].second;
      if (original.isTensor()) {
        aliases.sync_back(original.toTensor(), written_aliases[k].toTensor());
      } else if (original.isTensorList()) {
        auto devx_list = original.toTensorList();
        auto alias_list = written_aliases[k].toTensorList();
        for (size_t j = 0; j < devx_list.size(); ++j) aliases.sync_back(devx_list[j], alias_list[j]);
      }
    }
    // The kernel replaced the arguments on the stack by its returns.
    const auto& returns = schema.returns();
    for (size_t r = 0; r < returns.size(); ++r) {
      c10::IValue& v = (*stack)[first + r];
      if (const c10::IValue* original = written_argument_for(schema, returns[r], originals)) {
        v = *original;
        continue;
      }
      if (host_results) continue;
      TORCH_CHECK(v.isTensor() || !v.isTensorList() || v.toTensorList().empty() ||
                      !v.toTensorList().get(0).is_nested(),
                  "devx: ", schema.operator_name(), " returns a list of nested tensors, which devx does not support");
      map_tensors(v, [&](const at::Tensor& t) { return aliases.out(t, r); });
    }
    pending = std::move(aliases.pending());
  }
  // Now that CPU allocations are host memory again: nested metadata the kernel made in devx memory
  // moves to the host.
  for (PendingNested& p : pending) {
    (*stack)[first + p.slot] = at::detail::make_tensor<at::native::NestedTensorImpl>(
        p.buffer, to_host_memory(p.sizes), to_host_memory(p.strides), to_host_memory(p.offsets));
  }
  if (host_results) {
    for (size_t r = 0; r < schema.returns().size(); ++r) {
      c10::IValue& v = (*stack)[first + r];
      if (v.isTensor()) v = to_host_memory(v.toTensor());
    }
  }
}

}  // namespace devx
