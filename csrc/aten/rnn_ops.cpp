// The fused RNN cells PyTorch uses on accelerators (nn.LSTM/GRU on CUDA and PrivateUse1 take
// _thnn_fused_*_cell, which has no CPU kernel): the same arithmetic as CUDA's fused kernels,
// written with ATen ops so it runs on any vendor. The workspaces have CUDA's layouts, so the
// backward ops read what the forward ops stored.
#include <ATen/TensorOperators.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/sigmoid.h>
#include <ATen/ops/tanh.h>
#include <ATen/ops/zeros_like.h>
#include <torch/library.h>

#include "runtime/device.h"

namespace devx::ops {

namespace {

at::Tensor with_bias(const at::Tensor& gates, const std::optional<at::Tensor>& bias) {
  return bias.has_value() && bias->defined() ? gates + *bias : gates;
}

// (hy, cy, workspace = [i, f, g, o] activated)
std::tuple<at::Tensor, at::Tensor, at::Tensor> fused_lstm_cell(const at::Tensor& input_gates,
                                                               const at::Tensor& hidden_gates, const at::Tensor& cx,
                                                               const std::optional<at::Tensor>& input_bias,
                                                               const std::optional<at::Tensor>& hidden_bias) {
  DevxGuard guard(input_gates.device());
  at::Tensor gates = with_bias(with_bias(input_gates + hidden_gates, input_bias), hidden_bias);
  auto chunks = gates.chunk(4, 1);
  at::Tensor i = chunks[0].sigmoid(), f = chunks[1].sigmoid(), g = chunks[2].tanh(), o = chunks[3].sigmoid();
  at::Tensor cy = f * cx + i * g;
  at::Tensor hy = o * cy.tanh();
  return {hy, cy, at::cat({i, f, g, o}, 1)};
}

// (grad_gates, grad_cx, grad_bias)
std::tuple<at::Tensor, at::Tensor, at::Tensor> fused_lstm_cell_backward(const std::optional<at::Tensor>& grad_hy,
                                                                        const std::optional<at::Tensor>& grad_cy,
                                                                        const at::Tensor& cx, const at::Tensor& cy,
                                                                        const at::Tensor& workspace, bool has_bias) {
  DevxGuard guard(workspace.device());
  auto chunks = workspace.chunk(4, 1);
  const at::Tensor &i = chunks[0], &f = chunks[1], &g = chunks[2], &o = chunks[3];
  at::Tensor ghy = grad_hy.has_value() && grad_hy->defined() ? *grad_hy : at::zeros_like(cy);
  at::Tensor gcy = grad_cy.has_value() && grad_cy->defined() ? *grad_cy : at::zeros_like(cy);
  at::Tensor tanh_cy = cy.tanh();
  at::Tensor gc = ghy * o * (1 - tanh_cy * tanh_cy) + gcy;
  at::Tensor gi = gc * g * i * (1 - i);
  at::Tensor gf = gc * cx * f * (1 - f);
  at::Tensor gg = gc * i * (1 - g * g);
  at::Tensor go = ghy * tanh_cy * o * (1 - o);
  at::Tensor grad_gates = at::cat({gi, gf, gg, go}, 1);
  return {grad_gates, gc * f, has_bias ? grad_gates.sum(0) : at::Tensor()};
}

// (hy, workspace = [r, z, n, hx, hn])
std::tuple<at::Tensor, at::Tensor> fused_gru_cell(const at::Tensor& input_gates, const at::Tensor& hidden_gates,
                                                  const at::Tensor& hx, const std::optional<at::Tensor>& input_bias,
                                                  const std::optional<at::Tensor>& hidden_bias) {
  DevxGuard guard(input_gates.device());
  auto ig = with_bias(input_gates, input_bias).chunk(3, 1);
  auto hg = with_bias(hidden_gates, hidden_bias).chunk(3, 1);
  at::Tensor r = (ig[0] + hg[0]).sigmoid();
  at::Tensor z = (ig[1] + hg[1]).sigmoid();
  at::Tensor n = (ig[2] + r * hg[2]).tanh();
  at::Tensor hy = n + z * (hx - n);
  return {hy, at::cat({r, z, n, hx, hg[2]}, 1)};
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
