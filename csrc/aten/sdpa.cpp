// scaled_dot_product_attention on devx takes PyTorch's route for a PrivateUse1 backend: the
// composite asks _fused_sdp_choice_stub (a DispatchStub keyed on the device type, not the
// _fused_sdp_choice operator) which algorithm to run. devx answers what the compute device would
// choose, so a devx model computes what the CPU computes: where the CPU takes its flash kernel,
// devx takes OVERRIDEABLE and runs that same kernel on devx memory (the fused op and its
// backward below); everywhere else, the math path both devices share.
#include <ATen/core/Tensor.h>
#include <ATen/native/DispatchStub.h>
#include <ATen/native/transformers/attention.h>
#include <ATen/native/transformers/sdp_utils_cpp.h>
#include <ATen/ops/_fused_sdp_choice.h>
#include <ATen/ops/_scaled_dot_product_flash_attention_for_cpu.h>
#include <ATen/ops/_scaled_dot_product_flash_attention_for_cpu_backward.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include "runtime/device.h"
#include "runtime/vendor.h"

namespace devx::ops {

namespace {

int64_t fused_sdp_choice(const at::Tensor& query, const at::Tensor& key, const at::Tensor& value,
                         const std::optional<at::Tensor>& attn_mask, double dropout_p, bool is_causal,
                         std::optional<double> scale, bool enable_gqa) {
  if (vendor().compute_device_type != static_cast<int>(c10::DeviceType::CPU)) {
    return static_cast<int64_t>(sdp::SDPBackend::math);
  }
  // The CPU refuses its flash kernel for a mask that requires grad (the kernel gives the mask no
  // gradient). The operator below runs on aliases, which do not require grad, so that part of
  // the CPU's decision is made here.
  if (attn_mask.has_value() && attn_mask->defined() && attn_mask->requires_grad()) {
    return static_cast<int64_t>(sdp::SDPBackend::math);
  }
  // The CPU's choice, made by its own kernel of the operator (run on devx memory).
  const int64_t cpu_choice = at::_fused_sdp_choice(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa);
  return static_cast<int64_t>(cpu_choice == static_cast<int64_t>(sdp::SDPBackend::flash_attention)
                                  ? sdp::SDPBackend::overrideable
                                  : sdp::SDPBackend::math);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, c10::SymInt, c10::SymInt, at::Tensor, at::Tensor, at::Tensor>
fused_attention(const at::Tensor& query, const at::Tensor& key, const at::Tensor& value,
                const std::optional<at::Tensor>& attn_bias, double dropout_p, bool is_causal, bool return_debug_mask,
                std::optional<double> scale) {
  TORCH_CHECK(!return_debug_mask, "devx: scaled_dot_product_attention's fused kernel has no debug mask");
  DevxGuard guard(query.device());
  auto [out, logsumexp] =
      at::_scaled_dot_product_flash_attention_for_cpu(query, key, value, dropout_p, is_causal, attn_bias, scale);
  // The flash kernel needs none of the variable-length, dropout-seed or debug outputs.
  at::Tensor none = at::empty({0}, query.options());
  at::Tensor no_seed = at::empty({0}, query.options().dtype(at::kLong));
  return {out,  logsumexp,   none,    none, query.sym_size(-2), key.sym_size(-2), no_seed, no_seed,
          none};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> fused_attention_backward(
    const at::Tensor& grad_out, const at::Tensor& query, const at::Tensor& key, const at::Tensor& value,
    const at::Tensor& attn_bias, std::array<bool, 4> grad_input_mask, const at::Tensor& out,
    const at::Tensor& logsumexp, const at::Tensor&, const at::Tensor&, c10::SymInt, c10::SymInt, double dropout_p,
    bool is_causal, const at::Tensor&, const at::Tensor&, std::optional<double> scale) {
  // The CPU's flash kernel has no gradient for the mask; the CPU only chooses it when none is needed.
  TORCH_CHECK(!grad_input_mask[3] || !attn_bias.defined(),
              "devx: scaled_dot_product_attention's fused kernel gives no gradient for attn_mask");
  DevxGuard guard(query.device());
  std::optional<at::Tensor> mask = attn_bias.defined() ? std::optional<at::Tensor>(attn_bias) : std::nullopt;
  auto [grad_q, grad_k, grad_v] = at::_scaled_dot_product_flash_attention_for_cpu_backward(
      grad_out, query, key, value, out, logsumexp, dropout_p, is_causal, mask, scale);
  return {grad_q, grad_k, grad_v, at::Tensor()};
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_scaled_dot_product_fused_attention_overrideable", TORCH_FN(fused_attention));
  m.impl("_scaled_dot_product_fused_attention_overrideable_backward", TORCH_FN(fused_attention_backward));
}

}  // namespace devx::ops

// The registrar the macro defines must live at namespace scope, beside the stub it registers.
namespace at::native {
REGISTER_PRIVATEUSE1_DISPATCH(_fused_sdp_choice_stub, &devx::ops::fused_sdp_choice);
}  // namespace at::native
