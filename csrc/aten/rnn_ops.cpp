// The fused RNN cells PyTorch uses on accelerators (nn.LSTMCell/GRUCell, and nn.LSTM/GRU where
// the whole-sequence path of rnn_sequence.cpp does not apply, take _thnn_fused_*_cell, which has
// no CPU kernel): the same arithmetic as CUDA's fused kernels, written with ATen ops so it runs
// on any vendor. The workspaces have CUDA's layouts, so the
// backward ops read what the forward ops stored.
#include <ATen/TensorOperators.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/add.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/mul.h>
#include <ATen/ops/sigmoid.h>
#include <ATen/ops/sigmoid_backward.h>
#include <ATen/ops/tanh.h>
#include <ATen/ops/tanh_backward.h>
#include <ATen/ops/zeros_like.h>
#include <torch/library.h>

#include "runtime/device.h"

namespace devx::ops {

namespace {

at::Tensor with_bias(const at::Tensor& gates, const std::optional<at::Tensor>& bias) {
  return bias.has_value() && bias->defined() ? gates + *bias : gates;
}

// (hy, cy, workspace = [i, f, g, o] activated). The gates are activated in place and are the
// workspace themselves: no concatenation, one fresh buffer for them.
std::tuple<at::Tensor, at::Tensor, at::Tensor> fused_lstm_cell(const at::Tensor& input_gates,
                                                               const at::Tensor& hidden_gates, const at::Tensor& cx,
                                                               const std::optional<at::Tensor>& input_bias,
                                                               const std::optional<at::Tensor>& hidden_bias) {
  DevxGuard guard(input_gates.device());
  at::Tensor gates = input_gates + hidden_gates;
  if (input_bias.has_value() && input_bias->defined()) gates.add_(*input_bias);
  if (hidden_bias.has_value() && hidden_bias->defined()) gates.add_(*hidden_bias);
  const int64_t h = gates.size(1) / 4;
  gates.narrow(1, 0, 2 * h).sigmoid_();
  gates.narrow(1, 2 * h, h).tanh_();
  gates.narrow(1, 3 * h, h).sigmoid_();
  auto chunks = gates.chunk(4, 1);
  const at::Tensor &i = chunks[0], &f = chunks[1], &g = chunks[2], &o = chunks[3];
  at::Tensor cy = f * cx;
  cy.addcmul_(i, g);
  at::Tensor hy = cy.tanh().mul_(o);
  return {hy, cy, gates};
}

// (grad_gates, grad_cx, grad_bias). Each gate's gradient is written into its slice of
// grad_gates by the activation's own backward op (no concatenation).
std::tuple<at::Tensor, at::Tensor, at::Tensor> fused_lstm_cell_backward(const std::optional<at::Tensor>& grad_hy,
                                                                        const std::optional<at::Tensor>& grad_cy,
                                                                        const at::Tensor& cx, const at::Tensor& cy,
                                                                        const at::Tensor& workspace, bool has_bias) {
  DevxGuard guard(workspace.device());
  auto chunks = workspace.chunk(4, 1);
  const at::Tensor &i = chunks[0], &f = chunks[1], &g = chunks[2], &o = chunks[3];
  const bool has_ghy = grad_hy.has_value() && grad_hy->defined();
  at::Tensor ghy = has_ghy ? *grad_hy : at::zeros_like(cy);
  at::Tensor tanh_cy = cy.tanh();
  // gc = ghy * o * (1 - tanh(cy)^2) + gcy
  at::Tensor gc = at::tanh_backward(ghy * o, tanh_cy);
  if (grad_cy.has_value() && grad_cy->defined()) gc.add_(*grad_cy);
  at::Tensor grad_gates = at::empty_like(workspace);
  auto grad_chunks = grad_gates.chunk(4, 1);
  at::sigmoid_backward_out(grad_chunks[0], gc * g, i);
  at::sigmoid_backward_out(grad_chunks[1], gc * cx, f);
  at::tanh_backward_out(grad_chunks[2], gc * i, g);
  at::sigmoid_backward_out(grad_chunks[3], ghy * tanh_cy, o);
  return {grad_gates, gc.mul_(f), has_bias ? grad_gates.sum(0) : at::Tensor()};
}

// (hy, workspace = [r, z, n, hx, hn]). r, z and n are computed in their slices of the workspace
// (no concatenation of separately allocated gates).
std::tuple<at::Tensor, at::Tensor> fused_gru_cell(const at::Tensor& input_gates, const at::Tensor& hidden_gates,
                                                  const at::Tensor& hx, const std::optional<at::Tensor>& input_bias,
                                                  const std::optional<at::Tensor>& hidden_bias) {
  DevxGuard guard(input_gates.device());
  at::Tensor ig = with_bias(input_gates, input_bias);
  at::Tensor hg = with_bias(hidden_gates, hidden_bias);
  const int64_t h = hx.size(1);
  at::Tensor workspace =
      at::empty({hx.size(0), 5 * h}, hx.options().dtype(at::promote_types(ig.scalar_type(), hx.scalar_type())));
  at::Tensor rz = workspace.narrow(1, 0, 2 * h);
  at::add_out(rz, ig.narrow(1, 0, 2 * h), hg.narrow(1, 0, 2 * h)).sigmoid_();
  at::Tensor r = workspace.narrow(1, 0, h), z = workspace.narrow(1, h, h), n = workspace.narrow(1, 2 * h, h);
  at::Tensor hn = hg.narrow(1, 2 * h, h);
  // n = tanh(ig_n + r * hn)
  at::mul_out(n, r, hn).add_(ig.narrow(1, 2 * h, h)).tanh_();
  workspace.narrow(1, 3 * h, h).copy_(hx);
  workspace.narrow(1, 4 * h, h).copy_(hn);
  // hy = n + z * (hx - n)
  at::Tensor hy = (hx - n).mul_(z).add_(n);
  return {hy, workspace};
}

// (grad_input_gates, grad_hidden_gates, grad_hx, grad_input_bias, grad_hidden_bias)
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> fused_gru_cell_backward(
    const at::Tensor& grad_hy, const at::Tensor& workspace, bool has_bias) {
  DevxGuard guard(workspace.device());
  auto w = workspace.chunk(5, 1);
  const at::Tensor &r = w[0], &z = w[1], &n = w[2], &hx = w[3], &hn = w[4];
  at::Tensor gz = grad_hy * (hx - n) * z * (1 - z);
  at::Tensor gn = grad_hy * (1 - z) * (1 - n * n);
  at::Tensor gr = gn * hn * r * (1 - r);
  at::Tensor grad_input = at::cat({gr, gz, gn}, 1);
  at::Tensor grad_hidden = at::cat({gr, gz, gn * r}, 1);
  at::Tensor grad_hx = grad_hy * z;
  if (!has_bias) return {grad_input, grad_hidden, grad_hx, at::Tensor(), at::Tensor()};
  return {grad_input, grad_hidden, grad_hx, grad_input.sum(0), grad_hidden.sum(0)};
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_thnn_fused_lstm_cell", TORCH_FN(fused_lstm_cell));
  m.impl("_thnn_fused_lstm_cell_backward_impl", TORCH_FN(fused_lstm_cell_backward));
  m.impl("_thnn_fused_gru_cell", TORCH_FN(fused_gru_cell));
  m.impl("_thnn_fused_gru_cell_backward", TORCH_FN(fused_gru_cell_backward));
}

}  // namespace devx::ops
