// The batch-norm pieces nn.SyncBatchNorm calls (torch/nn/modules/_functions.py), which ATen has
// only for CUDA: per-rank statistics, their combination across ranks, the normalisation, and the
// two halves of the backward pass. Written with ATen ops, so they run on any vendor; the results
// have CUDA's dtypes (statistics in the accumulate type: float for half and bfloat16 inputs) and
// layouts (outputs in the input's suggested memory format), and the arithmetic is CUDA's.
#include <ATen/AccumulateType.h>
#include <ATen/TensorOperators.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/full.h>
#include <ATen/ops/var_mean.h>
#include <ATen/ops/where.h>
#include <torch/library.h>

#include "runtime/device.h"

namespace devx::ops {

namespace {

bool given(const std::optional<at::Tensor>& t) {
  return t.has_value() && t->defined();
}

// The statistics' dtype for `input`: CUDA's accumulate type.
c10::ScalarType stats_dtype(const at::Tensor& input) {
  return at::toAccumulateType(input.scalar_type(), /*is_cuda=*/true);
}

// Every dimension but the channels (1).
std::vector<int64_t> reduced_dims(const at::Tensor& input) {
  TORCH_CHECK(input.dim() >= 2, "batch norm expects an input of at least 2 dimensions (N, C, ...), got ",
              input.dim());
  std::vector<int64_t> dims{0};
  for (int64_t d = 2; d < input.dim(); ++d) dims.push_back(d);
  return dims;
}

// Per-channel values (C) shaped to broadcast against `input` (N, C, ...).
at::Tensor per_channel(const at::Tensor& values, const at::Tensor& input) {
  std::vector<int64_t> shape(input.dim(), 1);
  shape[1] = values.numel();
  return values.view(shape);
}

// CUDA's InvStd: 0 where variance and epsilon are both 0, rather than inf.
at::Tensor inv_std(const at::Tensor& var, double eps) {
  at::Tensor denom = var + eps;
  return at::where(denom == 0, at::zeros_like(denom), denom.rsqrt());
}

at::Tensor in_format_of(const at::Tensor& result, const at::Tensor& like, c10::ScalarType dtype) {
  at::Tensor out = at::empty_like(like, like.options().dtype(dtype), like.suggest_memory_format());
  out.copy_(result);
  return out;
}

std::tuple<at::Tensor, at::Tensor> sync_batch_norm_stats(const at::Tensor& input, double eps) {
  DevxGuard guard(input.device());
  auto [var, mean] = at::var_mean(input.to(stats_dtype(input)), reduced_dims(input), /*correction=*/0,
                                  /*keepdim=*/false);
  return {mean, inv_std(var, eps)};
}

at::Tensor normalize(const at::Tensor& input, const std::optional<at::Tensor>& weight,
                     const std::optional<at::Tensor>& bias, const at::Tensor& mean, const at::Tensor& invstd) {
  const c10::ScalarType acc = stats_dtype(input);
  at::Tensor x = input.to(acc);
  at::Tensor r = (x - per_channel(mean.to(acc), x)) * per_channel(invstd.to(acc), x);
  if (given(weight)) r = r * per_channel(weight->to(acc), x);
  if (given(bias)) r = r + per_channel(bias->to(acc), x);
  return r;
}

at::Tensor sync_batch_norm_elemt(const at::Tensor& input, const std::optional<at::Tensor>& weight,
                            const std::optional<at::Tensor>& bias, const at::Tensor& mean, const at::Tensor& invstd,
                            double /*eps: invstd already holds it*/) {
  DevxGuard guard(input.device());
  return in_format_of(normalize(input, weight, bias, mean, invstd), input, input.scalar_type());
}

at::Tensor& sync_batch_norm_elemt_out(const at::Tensor& input, const std::optional<at::Tensor>& weight,
                                 const std::optional<at::Tensor>& bias, const at::Tensor& mean,
                                 const at::Tensor& invstd, double /*eps*/, at::Tensor& out) {
  DevxGuard guard(input.device());
  at::Tensor r = normalize(input, weight, bias, mean, invstd);
  if (out.sizes() != input.sizes()) out.resize_(input.sizes(), input.suggest_memory_format());
  out.copy_(r);
  return out;
}

// Combines each rank's (mean, invstd, count) rows into the statistics of all ranks' inputs (Chan
// et al.'s parallel variance, as CUDA's kernel), and updates the running statistics with them
// (the variance unbiased over the total count).
std::tuple<at::Tensor, at::Tensor> sync_batch_norm_gather_stats_with_counts(
    const at::Tensor& input, const at::Tensor& mean, const at::Tensor& invstd,
    const std::optional<at::Tensor>& running_mean, const std::optional<at::Tensor>& running_var, double momentum,
    double eps, const at::Tensor& counts) {
  DevxGuard guard(input.device());
  const c10::ScalarType acc = mean.scalar_type();
  at::Tensor c = counts.to(acc).view({-1, 1});
  at::Tensor n = c.sum(0);
  at::Tensor m = mean.to(acc);
  at::Tensor avg = (m * c).sum(0) / n;
  at::Tensor std_i = invstd.to(acc).reciprocal();
  at::Tensor var_n = ((std_i * std_i - eps) * c).sum(0) + ((m - avg) * (m - avg) * c).sum(0);
  at::Tensor global_invstd = inv_std(var_n / n, eps);
  if (given(running_mean)) {
    running_mean->copy_(running_mean->to(acc) * (1 - momentum) + avg * momentum);
  }
  if (given(running_var)) {
    running_var->copy_(running_var->to(acc) * (1 - momentum) + var_n / (n - 1) * momentum);
  }
  return {avg, global_invstd};
}

std::tuple<at::Tensor, at::Tensor> sync_batch_norm_gather_stats(const at::Tensor& input, const at::Tensor& mean,
                                                           const at::Tensor& invstd,
                                                           const std::optional<at::Tensor>& running_mean,
                                                           const std::optional<at::Tensor>& running_var,
                                                           double momentum, double eps, int64_t count) {
  DevxGuard guard(input.device());
  const c10::ScalarType dtype = given(running_mean) ? running_mean->scalar_type() : input.scalar_type();
  at::Tensor counts = at::full({mean.size(0)}, count, input.options().dtype(dtype));
  return sync_batch_norm_gather_stats_with_counts(input, mean, invstd, running_mean, running_var, momentum, eps,
                                                 counts);
}

void check_stats_dtypes(const at::Tensor& mean, const at::Tensor& invstd) {
  TORCH_CHECK(mean.scalar_type() == invstd.scalar_type(), "mean and invstd need to have the same data types");
}

// (sum_dy, sum_dy_xmu, grad_weight, grad_bias), each only where asked for.
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> sync_batch_norm_backward_reduce(
    const at::Tensor& grad_out, const at::Tensor& input, const at::Tensor& mean, const at::Tensor& invstd,
    const std::optional<at::Tensor>& weight, bool input_g, bool weight_g, bool bias_g) {
  DevxGuard guard(input.device());
  check_stats_dtypes(mean, invstd);
  const c10::ScalarType acc = mean.scalar_type();
  const std::vector<int64_t> dims = reduced_dims(input);
  at::Tensor g = grad_out.to(acc);
  at::Tensor sum_dy = g.sum(dims);
  at::Tensor sum_dy_xmu = (g * (input.to(acc) - per_channel(mean, g))).sum(dims);
  const c10::ScalarType param_dtype = given(weight) ? weight->scalar_type() : input.scalar_type();
  at::Tensor grad_weight = weight_g ? (sum_dy_xmu * invstd).to(param_dtype) : at::Tensor();
  at::Tensor grad_bias = bias_g ? sum_dy.to(param_dtype) : at::Tensor();
  if (!input_g) return {at::Tensor(), at::Tensor(), grad_weight, grad_bias};
  return {sum_dy, sum_dy_xmu, grad_weight, grad_bias};
}

// The input's gradient from the all-reduced sums; `count` holds each rank's element count per channel.
at::Tensor sync_batch_norm_backward_elemt(const at::Tensor& grad_out, const at::Tensor& input, const at::Tensor& mean,
                                     const at::Tensor& invstd, const std::optional<at::Tensor>& weight,
                                     const at::Tensor& sum_dy, const at::Tensor& sum_dy_xmu, const at::Tensor& count) {
  DevxGuard guard(input.device());
  check_stats_dtypes(mean, invstd);
  const c10::ScalarType acc = mean.scalar_type();
  at::Tensor g = grad_out.to(acc);
  at::Tensor n = count.sum().to(acc);
  at::Tensor is = invstd.to(acc);
  at::Tensor mean_dy = per_channel(sum_dy.to(acc) / n, g);
  at::Tensor xmu_factor = per_channel(is * is * sum_dy_xmu.to(acc) / n, g);
  at::Tensor scale = per_channel(given(weight) ? weight->to(acc) * is : is, g);
  at::Tensor r = (g - mean_dy - (input.to(acc) - per_channel(mean.to(acc), g)) * xmu_factor) * scale;
  return in_format_of(r, grad_out, grad_out.scalar_type());
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("batch_norm_stats", TORCH_FN(sync_batch_norm_stats));
  m.impl("batch_norm_elemt", TORCH_FN(sync_batch_norm_elemt));
  m.impl("batch_norm_elemt.out", TORCH_FN(sync_batch_norm_elemt_out));
  m.impl("batch_norm_gather_stats", TORCH_FN(sync_batch_norm_gather_stats));
  m.impl("batch_norm_gather_stats_with_counts", TORCH_FN(sync_batch_norm_gather_stats_with_counts));
  m.impl("batch_norm_backward_reduce", TORCH_FN(sync_batch_norm_backward_reduce));
  m.impl("batch_norm_backward_elemt", TORCH_FN(sync_batch_norm_backward_elemt));
}

}  // namespace devx::ops
