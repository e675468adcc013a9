// Registration of layout_compute (layout_compute.h) and of PyTorch's device-generic kernels for the
// copies and the member accessors of those kinds, kept apart from the kernel's logic.
#include <ATen/ops/_coalesced_native.h>
#include <ATen/ops/_dimI_native.h>
#include <ATen/ops/_dimV_native.h>
#include <ATen/ops/_indices_native.h>
#include <ATen/ops/_nnz_native.h>
#include <ATen/ops/_sparse_coo_tensor_with_dims_and_tensors_native.h>
#include <ATen/ops/_sparse_coo_tensor_with_dims_native.h>
#include <ATen/ops/_to_copy_native.h>
#include <ATen/ops/_values_native.h>
#include <ATen/ops/ccol_indices_native.h>
#include <ATen/ops/col_indices_native.h>
#include <ATen/ops/crow_indices_native.h>
#include <ATen/ops/dense_dim_native.h>
#include <ATen/ops/indices_native.h>
#include <ATen/ops/is_coalesced_native.h>
#include <ATen/ops/row_indices_native.h>
#include <ATen/ops/sparse_dim_native.h>
#include <ATen/ops/sparse_resize_and_clear_native.h>
#include <ATen/ops/sparse_resize_native.h>
#include <ATen/ops/values_native.h>
#include <ATen/ops/copy_native.h>
#include <ATen/ops/copy_sparse_to_sparse_native.h>
#include <ATen/ops/empty_like_native.h>
#include <ATen/ops/empty_quantized_native.h>
#include <torch/library.h>

#include <memory>

#include "aten/async_ops.h"
#include "aten/diagnostics.h"
#include "aten/layout_compute.h"
#include "aten/op_registry.h"
#include "aten/tensor_ops.h"
#include "runtime/vendor.h"

namespace devx {

namespace {

std::unique_ptr<torch::Library> g_library;
std::unique_ptr<torch::Library> g_quantized_library;
std::vector<std::string> g_layout_ops;

void diagnosed_layout_compute(const c10::OperatorHandle& op, c10::DispatchKeySet ks, torch::jit::Stack* stack) {
  if (C10_LIKELY(!diag::gate_open()) || async::t_inline_depth > 0 || diag::quiet()) {
    layout_compute(op, ks, stack);
    return;
  }
  diag::run(op, ks, stack, [&](torch::jit::Stack* s) { layout_compute(op, ks, s); });
}

// What reads or sets a sparse tensor's members (indices, values, nnz, the coalesced flag) or makes
// one around given members: PyTorch's own kernels, the ones it registers for SparseCPU and
// SparseCUDA alike, which touch only the TensorImpl and views of its members. Run on aliases they
// would cost a compute scope per call (and, asynchronously, a wait for the stream) for no work.
void register_member_kernels(torch::Library& library) {
  const c10::DispatchKey coo = c10::DispatchKey::SparsePrivateUse1;
  library.impl("_values", torch::dispatch(coo, TORCH_FN(at::native::_values_sparse)));
  library.impl("_indices", torch::dispatch(coo, TORCH_FN(at::native::_indices_sparse)));
  library.impl("values", torch::dispatch(coo, TORCH_FN(at::native::values_sparse)));
  library.impl("indices", torch::dispatch(coo, TORCH_FN(at::native::indices_sparse)));
  library.impl("is_coalesced", torch::dispatch(coo, TORCH_FN(at::native::is_coalesced_sparse)));
  library.impl("_coalesced_", torch::dispatch(coo, TORCH_FN(at::native::_coalesced_sparse_)));
  library.impl("_nnz", torch::dispatch(coo, TORCH_FN(at::native::_nnz_sparse)));
  library.impl("sparse_dim", torch::dispatch(coo, TORCH_FN(at::native::sparse_dim_sparse)));
  library.impl("dense_dim", torch::dispatch(coo, TORCH_FN(at::native::dense_dim_sparse)));
  library.impl("_dimI", torch::dispatch(coo, TORCH_FN(at::native::sparse_dim_sparse)));
  library.impl("_dimV", torch::dispatch(coo, TORCH_FN(at::native::dense_dim_sparse)));
  library.impl("_sparse_coo_tensor_with_dims", torch::dispatch(coo, TORCH_FN(at::native::new_with_dims_sparse)));
  library.impl("_sparse_coo_tensor_with_dims_and_tensors",
               torch::dispatch(coo, TORCH_FN(at::native::new_with_dims_and_tensor_sparse_symint)));
  library.impl("sparse_resize_", torch::dispatch(coo, TORCH_FN(at::native::sparse_resize_)));
  library.impl("sparse_resize_and_clear_", torch::dispatch(coo, TORCH_FN(at::native::sparse_resize_and_clear_)));
  const c10::DispatchKey compressed = c10::DispatchKey::SparseCsrPrivateUse1;
  library.impl("values", torch::dispatch(compressed, TORCH_FN(at::native::values_sparse_csr)));
  library.impl("crow_indices", torch::dispatch(compressed, TORCH_FN(at::native::crow_indices_sparse_csr)));
  library.impl("col_indices", torch::dispatch(compressed, TORCH_FN(at::native::col_indices_sparse_csr)));
  library.impl("ccol_indices", torch::dispatch(compressed, TORCH_FN(at::native::ccol_indices_sparse_csr)));
  library.impl("row_indices", torch::dispatch(compressed, TORCH_FN(at::native::row_indices_sparse_csr)));
  library.impl("_nnz", torch::dispatch(compressed, TORCH_FN(at::native::_nnz_sparse_csr)));
  library.impl("sparse_dim", torch::dispatch(compressed, TORCH_FN(at::native::sparse_dim_sparse_csr)));
  library.impl("dense_dim", torch::dispatch(compressed, TORCH_FN(at::native::dense_dim_sparse_csr)));
}

}  // namespace

void register_layout_kernels() {
  const DevxVendorApi& v = vendor();
  if (v.compute_device_type < 0) return;
  const c10::BackendComponent compute = c10::toBackendComponent(
      c10::computeDispatchKey(std::nullopt, std::nullopt, static_cast<c10::DeviceType>(v.compute_device_type)));
  g_library = std::make_unique<torch::Library>(torch::Library::IMPL, "aten", std::nullopt, __FILE__, __LINE__);
  // Copies between devices and empty_like to another device: PyTorch's device-generic kernels
  // (a kernel on aliases would put a CPU result in devx memory).
  const c10::DispatchKey nested = c10::DispatchKey::NestedTensorPrivateUse1;
  g_library->impl("_to_copy", torch::dispatch(nested, TORCH_FN(at::native::_to_copy_nested)));
  g_library->impl("copy_", torch::dispatch(nested, TORCH_FN(at::native::copy_nested_)));
  g_library->impl("empty_like", torch::dispatch(nested, TORCH_FN(at::native::empty_like_nested)));
  const c10::DispatchKey sparse = c10::DispatchKey::SparsePrivateUse1;
  g_library->impl("empty_like", torch::dispatch(sparse, TORCH_FN(at::native::empty_like_sparse_coo)));
  g_library->impl("copy_", torch::dispatch(sparse, TORCH_FN(at::native::copy_sparse_wrapper_)));
  g_library->impl("copy_sparse_to_sparse_", torch::dispatch(sparse, TORCH_FN(at::native::copy_sparse_)));
  g_library->impl("empty_like",
                  torch::dispatch(c10::DispatchKey::SparseCsrPrivateUse1, TORCH_FN(at::native::empty_like_sparse_csr)));
  register_member_kernels(*g_library);
  const c10::DispatchKey quantized = c10::DispatchKey::QuantizedPrivateUse1;
  g_library->impl("empty_like", torch::dispatch(quantized, TORCH_FN(at::native::empty_like_quantized)));
  g_library->impl("empty_quantized", torch::dispatch(quantized, TORCH_FN(at::native::empty_quantized)));
  // copy_ has set the destination's quantizer: what remains is a copy of the bytes.
  g_library->impl("_copy_from", torch::dispatch(quantized, TORCH_FN(ops::copy_from)));

  const c10::DispatchKey functionalities[] = {c10::DispatchKey::Sparse, c10::DispatchKey::SparseCsr,
                                              c10::DispatchKey::NestedTensor, c10::DispatchKey::Quantized};
  const c10::DispatchKey dense_compute = c10::toRuntimePerBackendFunctionalityKey(c10::DispatchKey::Dense, compute);
  static const char* const kLayoutMakers[] = {"aten::_nested",   "aten::nested",   "aten::_to_sparse", "aten::to_sparse",
                                              "aten::_sparse",   "aten::sparse",   "aten::quantize",   "aten::_quantize",
                                              "aten::dequantize", "aten::_make_per"};
  // The quantized operator library (quantized::add, the prepacked convolutions and linear layers)
  // has kernels for the quantized tensors of the compute device too.
  g_quantized_library =
      std::make_unique<torch::Library>(torch::Library::IMPL, "quantized", std::nullopt, __FILE__, __LINE__);
  auto& dispatcher = c10::Dispatcher::singleton();
  for (const c10::OperatorName& name : dispatcher.getAllOpNames()) {
    const bool aten = name.name.rfind("aten::", 0) == 0;
    if (!aten && name.name.rfind("quantized::", 0) != 0) continue;
    auto handle = dispatcher.findOp(name);
    if (!handle) continue;
    const std::string full = name.overload_name.empty() ? name.name : name.name + "." + name.overload_name;
    const std::string short_name = aten ? full.substr(6) : full;
    torch::Library& library = aten ? *g_library : *g_quantized_library;
    for (c10::DispatchKey f : functionalities) {
      const c10::DispatchKey devx_key =
          c10::toRuntimePerBackendFunctionalityKey(f, c10::BackendComponent::PrivateUse1Bit);
      if (handle->hasKernelForDispatchKey(devx_key) ||
          !handle->hasKernelForDispatchKey(c10::toRuntimePerBackendFunctionalityKey(f, compute)) ||
          !vendor_supports(short_name)) {
        continue;
      }
      library.impl(full.c_str(),
                   torch::dispatch(devx_key, torch::CppFunction::makeFromBoxedFunction<&diagnosed_layout_compute>()));
      g_layout_ops.push_back(std::string(c10::toString(f)) + ":" + short_name);
    }
    if (!aten) continue;
    bool maker = false;
    for (const char* p : kLayoutMakers) maker = maker || name.name.rfind(p, 0) == 0;
    if (maker && !handle->hasKernelForDispatchKey(c10::DispatchKey::PrivateUse1) &&
        !handle->hasKernelForDispatchKey(c10::DispatchKey::CompositeImplicitAutograd) &&
        handle->hasKernelForDispatchKey(dense_compute) && vendor_supports(short_name)) {
      g_library->impl(full.c_str(), torch::dispatch(c10::DispatchKey::PrivateUse1,
                                                    torch::CppFunction::makeFromBoxedFunction<&diagnosed_layout_compute>()));
      g_layout_ops.push_back("Dense:" + short_name);
    }
  }
}

const std::vector<std::string>& layout_ops() {
  return g_layout_ops;
}

}  // namespace devx
