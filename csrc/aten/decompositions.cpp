// Ops that have no out= form, so no vendor kernel can be declared for them in the op table, and
// whose CPU kernel only checks its arguments and calls other ops of the table: registered as those
// ops, which then run on the vendor's kernels where it has them (and on ATen's or the CPU fallback
// otherwise).
#include <ATen/core/Tensor.h>
#include <ATen/ops/_embedding_bag_dense_backward_ops.h>
#include <ATen/ops/_embedding_bag_sparse_backward_ops.h>
#include <ATen/ops/cumsum.h>
#include <ATen/ops/native_batch_norm_backward_ops.h>
#include <ATen/ops/ones_like.h>
#include <ATen/ops/zeros.h>
#include <torch/library.h>

#include "runtime/device.h"

namespace devx::ops {

namespace {

// What _batch_norm_with_update's autograd formula calls. The CPU's kernel for it is
// native_batch_norm_backward's (`update` is its `train`; `reserve` is for cuDNN and MIOpen only).
std::tuple<at::Tensor, at::Tensor, at::Tensor> batch_norm_backward(
    const at::Tensor& grad_out, const at::Tensor& input, const at::Tensor& weight,
    const std::optional<at::Tensor>& running_mean, const std::optional<at::Tensor>& running_var,
    const std::optional<at::Tensor>& save_mean, const std::optional<at::Tensor>& save_var, bool update, double eps,
    std::array<bool, 3> output_mask, const at::Tensor& /*reserve*/) {
  DevxGuard guard(input.device());
  const std::optional<at::Tensor> w = weight.defined() ? std::optional<at::Tensor>(weight) : std::nullopt;
  return at::_ops::native_batch_norm_backward::call(grad_out, input, w, running_mean, running_var, save_mean, save_var,
                                                    update, eps, output_mask);
}

// What _embedding_bag's autograd formula calls, for the weight's gradient: the dense (or sparse)
// backward. A forward whose sum fast path left offset2bag empty (the CPU's) has it rebuilt from
// the offsets first: the bag of index i is the number of offsets <= i, less one.
at::Tensor embedding_bag_backward(const at::Tensor& grad, const at::Tensor& indices, const at::Tensor& offsets,
                                  const at::Tensor& offset2bag, const at::Tensor& bag_size,
                                  const at::Tensor& maximum_indices, c10::SymInt num_weights, bool scale_grad_by_freq,
                                  int64_t mode, bool sparse, const std::optional<at::Tensor>& per_sample_weights,
                                  int64_t padding_idx) {
  DevxGuard guard(grad.device());
  TORCH_CHECK(indices.scalar_type() == at::kLong || indices.scalar_type() == at::kInt,
              "embedding_bag: expected indices to be long or int, got ", indices.scalar_type());
  TORCH_CHECK(offsets.scalar_type() == indices.scalar_type(),
              "embedding_bag: expected indices and offsets to have the same dtype");
  at::Tensor bags = offset2bag;
  if (indices.numel() != 0 && offset2bag.numel() == 0) {
    bags = at::zeros({indices.size(0) + 1}, offsets.options());
    bags.index_add_(0, offsets, at::ones_like(offsets));
    bags.select(0, 0).sub_(1);
    bags = at::cumsum(bags, 0, bags.scalar_type()).narrow(0, 0, indices.size(0));
  }
  if (sparse) {
    return at::_ops::_embedding_bag_sparse_backward::call(grad, indices, offsets, bags, bag_size, std::move(num_weights),
                                                          scale_grad_by_freq, mode, per_sample_weights, padding_idx);
  }
  return at::_ops::_embedding_bag_dense_backward::call(grad, indices, bags, bag_size, maximum_indices,
                                                       std::move(num_weights), scale_grad_by_freq, mode,
                                                       per_sample_weights, padding_idx);
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("batch_norm_backward", TORCH_FN(batch_norm_backward));
  m.impl("_embedding_bag_backward", TORCH_FN(embedding_bag_backward));
}

}  // namespace devx::ops
