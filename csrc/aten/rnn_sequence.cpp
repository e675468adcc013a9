// nn.LSTM/GRU/RNN on devx run the compute device's whole-sequence implementation.
//
// aten::lstm, gru, rnn_tanh and rnn_relu are CompositeImplicitAutograd. On a devx tensor their
// composite takes the accelerator route, cell by cell (a _thnn_fused_*_cell per step and layer,
// thousands of ops per train step), where the CPU runs oneDNN's whole-sequence kernel (LSTM) or
// projects the inputs of the whole sequence at once (GRU, RNN). devx registers these ops for
// PrivateUse1 and AutogradPrivateUse1 and runs the compute device's own implementation of the
// whole op on aliases, with autograd: the compute device's graph of the op is kept by one devx
// node, whose backward runs that graph's backward on aliases of the incoming gradients. On
// cpu_sim that is the CPU's own code, so results and gradients are the CPU's bit for bit.
//
// The composite (cell by cell) still runs where this cannot: a compute device other than the CPU
// (its backward would run on that device's own autograd threads, outside the devx scope), a vendor
// that refuses the op (DEVX_SIM_KERNELS=own-only, DEVX_SIM_UNSUPPORTED_OPS), tensors or modes that
// the Python dispatcher handles (fake tensors, dispatch modes, functorch transforms).
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/autocast_mode.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/gru.h>
#include <ATen/ops/gru_native.h>
#include <ATen/ops/lstm.h>
#include <ATen/ops/lstm_native.h>
#include <ATen/ops/rnn_relu.h>
#include <ATen/ops/rnn_relu_native.h>
#include <ATen/ops/rnn_tanh.h>
#include <ATen/ops/rnn_tanh_native.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/functions/utils.h>
#include <torch/csrc/autograd/saved_variable.h>
#include <torch/library.h>

#include <atomic>
#include <cstring>
#include <functional>
#include <memory>
#include <type_traits>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "aten/async_ops.h"
#include "aten/compute_scope.h"
#include "aten/op_registry.h"
#include "profiler/device_activity.h"
#include "runtime/device.h"
#include "runtime/generator.h"
#include "runtime/stream.h"
#include "runtime/sync_debug.h"
#include "runtime/vendor.h"

namespace devx::ops {

namespace {

using torch::autograd::variable_list;

// Whether the vendor lets the compute device run `overload` (asked once per overload).
class Supported {
 public:
  explicit Supported(const char* overload) : overload_(overload) {}
  bool operator()() {
    std::call_once(once_, [this] {
      ok_ = compute_device_type() == static_cast<int>(c10::kCPU) && vendor_supports(overload_);
    });
    return ok_;
  }

 private:
  const char* overload_;
  std::once_flag once_;
  bool ok_ = false;
};

bool whole_sequence(Supported& supported, const std::vector<at::Tensor>& tensors) {
  if (c10::impl::tls_is_dispatch_key_included(c10::DispatchKey::Python)) return false;
  for (const at::Tensor& t : tensors) {
    if (!t.defined() || t.device().type() != kDevx ||
        t.key_set().has_any(c10::python_ks | c10::functorch_transforms_ks)) {
      return false;
    }
  }
  return supported();
}

// While alive, the CPU's default generator draws the numbers of `device`'s devx generator: the
// compute device's dropout between layers takes no generator argument, and must advance devx's.
class DevxNumbersOnCpuGenerator {
 public:
  explicit DevxNumbersOnCpuGenerator(c10::DeviceIndex device)
      : cpu_(at::detail::getDefaultCPUGenerator()), devx_(compute_generator_for(std::nullopt, device)) {
    std::scoped_lock lock(cpu_.mutex(), devx_.mutex());
    saved_ = cpu_.get_state();
    cpu_.set_state(devx_.get_state());
  }
  ~DevxNumbersOnCpuGenerator() {
    std::scoped_lock lock(cpu_.mutex(), devx_.mutex());
    devx_.set_state(cpu_.get_state());
    cpu_.set_state(saved_);
  }
  DevxNumbersOnCpuGenerator(const DevxNumbersOnCpuGenerator&) = delete;
  DevxNumbersOnCpuGenerator& operator=(const DevxNumbersOnCpuGenerator&) = delete;

 private:
  at::Generator cpu_;
  at::Generator devx_;
  at::Tensor saved_;
};

// Under torch.autocast("devx") the op runs under the compute device's autocast, with devx's
// dtype: its policy casts the whole op (CPU) where devx's composite got low precision from its
// matmuls, as CUDA gets it from _cudnn_rnn's cast. The cast cache stays off: the leaves it would
// key on are this op's own.
class ComputeAutocast {
 public:
  ComputeAutocast() : active_(at::autocast::is_autocast_enabled(c10::kPrivateUse1)) {
    if (!active_) return;
    enabled_ = at::autocast::is_autocast_enabled(c10::kCPU);
    dtype_ = at::autocast::get_autocast_dtype(c10::kCPU);
    cache_ = at::autocast::is_autocast_cache_enabled();
    at::autocast::set_autocast_enabled(c10::kCPU, true);
    at::autocast::set_autocast_dtype(c10::kCPU, at::autocast::get_autocast_dtype(c10::kPrivateUse1));
    at::autocast::set_autocast_cache_enabled(false);
  }
  ~ComputeAutocast() {
    if (!active_) return;
    at::autocast::set_autocast_enabled(c10::kCPU, enabled_);
    at::autocast::set_autocast_dtype(c10::kCPU, dtype_);
    at::autocast::set_autocast_cache_enabled(cache_);
  }
  ComputeAutocast(const ComputeAutocast&) = delete;
  ComputeAutocast& operator=(const ComputeAutocast&) = delete;

 private:
  bool active_;
  bool enabled_ = false;
  bool cache_ = true;
  at::ScalarType dtype_ = at::kBFloat16;
};

// With asynchronous streams the op runs on the host once the stream is idle, as ops that cannot
// be issued do: it reads what issued work writes.
class RunsInline {
 public:
  explicit RunsInline(const char* op) : inline_(g_async_host_streams && async::issuing()) {
    if (!inline_) return;
    sync_debug::on_host_wait(op);
    getCurrentDevxStream(current_device()).synchronize();
    ++async::t_inline_depth;
  }
  ~RunsInline() {
    if (inline_) --async::t_inline_depth;
  }
  RunsInline(const RunsInline&) = delete;
  RunsInline& operator=(const RunsInline&) = delete;

 private:
  bool inline_;
};

// "lstm" of "aten::lstm".
const char* without_namespace(const char* op) {
  return op + std::strlen("aten::");
}

// The op's span on the device rows of torch.profiler, as the generated ops have (named
// "<vendor>::<op>"); inert when not recording.
class KernelSpan {
 public:
  explicit KernelSpan(const char* name) {
    if (C10_UNLIKELY(profiler::recording())) {
      span_.emplace(profiler::ActivityKind::kKernel, std::string(vendor().name) + "::" + name, getCurrentDevxStream());
    }
  }
  void finish() {
    if (span_) span_->finish();
  }

 private:
  std::optional<profiler::DeviceSpan> span_;
};

// Autograd nodes are held by std::shared_ptr up to torch 2.12 and by c10::intrusive_ptr since;
// Edge::function says which.
template <class T>
using NodeRef = std::conditional_t<std::is_same_v<decltype(torch::autograd::Edge::function),
                                                  std::shared_ptr<torch::autograd::Node>>,
                                   std::shared_ptr<T>, c10::intrusive_ptr<T>>;

template <class T, class... Args>
NodeRef<T> make_node(Args&&... args) {
  if constexpr (std::is_same_v<NodeRef<T>, std::shared_ptr<T>>) {
    return std::make_shared<T>(std::forward<Args>(args)...);
  } else {
    return c10::make_intrusive<T>(std::forward<Args>(args)...);
  }
}

// The backward of a whole-sequence op: the compute device's graph of the op, from the leaves
// aliasing the devx arguments to the outputs the devx outputs alias.
class WholeSequenceBackward final : public torch::autograd::Node {
 public:
  WholeSequenceBackward(std::string name, const char* op, c10::DeviceIndex device)
      : name_(std::move(name)),
        op_(op),
        backward_kernel_(std::string(without_namespace(op)) + "_backward"),
        device_(device) {}

  std::string name() const override { return name_; }

  variable_list apply(variable_list&& grads) override {
    TORCH_CHECK(!outputs_.empty(), torch::autograd::ERR_BACKWARD_TWICE);
    TORCH_CHECK(!at::GradMode::is_enabled(), "devx: ", op_,
                " runs the compute device's whole-sequence kernel, whose backward is not differentiable "
                "(create_graph=True / double backward through ", op_, " is not supported on devx)");
    DevxGuard guard(device_);
    RunsInline runs_inline(op_);
    ComputeScope scope;
    std::vector<at::Tensor> outputs, grad_outputs;
    for (size_t k = 0; k < grads.size(); ++k) {
      // An output the compute device's graph does not reach (none of what it depends on needs a
      // gradient) contributes nothing.
      if (!grads[k].defined() || !outputs_[k].requires_grad()) continue;
      outputs.push_back(outputs_[k]);
      grad_outputs.push_back(scope.in(grads[k]));
    }
    std::vector<size_t> wanted_index;
    std::vector<at::Tensor> wanted;
    for (size_t i = 0; i < leaves_.size(); ++i) {
      if (leaves_[i].defined() && should_compute_output(i)) {
        wanted_index.push_back(i);
        wanted.push_back(leaves_[i]);
      }
    }
    variable_list result(num_outputs());
    if (outputs.empty() || wanted.empty()) return result;
    KernelSpan span(backward_kernel_.c_str());
    // Retained: the engine says when the graph may go (release_variables), as for any node.
    variable_list computed = torch::autograd::grad(outputs, wanted, grad_outputs, /*retain_graph=*/true,
                                                   /*create_graph=*/false, /*allow_unused=*/true);
    span.finish();
    for (size_t j = 0; j < computed.size(); ++j) result[wanted_index[j]] = scope.out(std::move(computed[j]));
    return result;
  }

  void release_variables() override {
    outputs_.clear();
    leaves_.clear();
  }

  std::vector<at::Tensor> outputs_;
  std::vector<at::Tensor> leaves_;  // undefined where the argument needs no gradient

 private:
  std::string name_;
  const char* op_;               // "aten::lstm"
  std::string backward_kernel_;  // "lstm_backward"
  c10::DeviceIndex device_;
};

using Compute = std::function<std::vector<at::Tensor>(const std::vector<at::Tensor>&)>;

// Runs `compute` (the compute device's op on its arguments, given aliases of `args`) and returns
// its results as devx tensors, attached to the autograd graph when a gradient is needed.
std::vector<at::Tensor> run_whole_sequence(const char* op, const char* node_name, const std::vector<at::Tensor>& args,
                                           bool draws_numbers, const Compute& compute) {
  DevxGuard guard(args[0].device());
  RunsInline runs_inline(op);
  bool grad = false;
  if (at::GradMode::is_enabled()) {
    for (const at::Tensor& t : args) grad = grad || t.requires_grad();
  }
  ComputeScope scope;
  std::vector<at::Tensor> aliases;
  aliases.reserve(args.size());
  NodeRef<WholeSequenceBackward> node;
  if (grad) {
    node = make_node<WholeSequenceBackward>(node_name, op, current_device());
    node->leaves_.resize(args.size());
  }
  for (size_t i = 0; i < args.size(); ++i) {
    at::Tensor a = scope.in(args[i]);
    if (grad) {
      // A tensor of our own (the scope recycles its aliases), sharing the devx argument's version
      // counter: the compute device's graph then refuses a backward after an in-place change of
      // an argument it saved, as it would on its own tensors.
      a = a.detach();
      a.unsafeGetTensorImpl()->set_version_counter(args[i].unsafeGetTensorImpl()->version_counter());
      if (args[i].requires_grad()) {
        a.requires_grad_();
        node->leaves_[i] = a;
      }
    }
    aliases.push_back(std::move(a));
  }
  std::optional<DevxNumbersOnCpuGenerator> numbers;
  if (draws_numbers) numbers.emplace(current_device());
  std::vector<at::Tensor> results;
  {
    at::AutoGradMode enable(grad);
    ComputeAutocast autocast;
    KernelSpan span(without_namespace(op));
    results = compute(aliases);
    span.finish();
  }
  numbers.reset();
  if (!grad) return scope.out(std::move(results));
  std::vector<at::Tensor> outputs = scope.out(results);
  node->set_next_edges(torch::autograd::collect_next_edges(at::TensorList(args)));
  for (size_t k = 0; k < outputs.size(); ++k) {
    // The devx output is the compute device's output under another key: one version counter, so
    // an in-place change of it is seen by the graph that saved it.
    outputs[k].unsafeGetTensorImpl()->set_version_counter(results[k].unsafeGetTensorImpl()->version_counter());
    torch::autograd::set_history(outputs[k], node);
  }
  node->outputs_ = std::move(results);
  return outputs;
}

std::vector<at::Tensor> flat(std::initializer_list<at::TensorList> groups) {
  std::vector<at::Tensor> out;
  for (at::TensorList g : groups) out.insert(out.end(), g.begin(), g.end());
  return out;
}

at::TensorList slice(const std::vector<at::Tensor>& v, size_t first, size_t n) {
  return at::TensorList(v).slice(first, n);
}

Supported g_lstm_input("lstm.input"), g_lstm_data("lstm.data"), g_gru_input("gru.input"), g_gru_data("gru.data"),
    g_tanh_input("rnn_tanh.input"), g_tanh_data("rnn_tanh.data"), g_relu_input("rnn_relu.input"),
    g_relu_data("rnn_relu.data");

std::tuple<at::Tensor, at::Tensor, at::Tensor> lstm_input(const at::Tensor& input, at::TensorList hx,
                                                          at::TensorList params, bool has_biases, int64_t num_layers,
                                                          double dropout, bool train, bool bidirectional,
                                                          bool batch_first) {
  std::vector<at::Tensor> args = flat({input, hx, params});
  if (hx.size() != 2 || !whole_sequence(g_lstm_input, args)) {
    return at::native::lstm(input, hx, params, has_biases, num_layers, dropout, train, bidirectional, batch_first);
  }
  auto r = run_whole_sequence("aten::lstm", "LstmBackward", args, dropout > 0 && train, [&](const auto& a) {
    auto [out, hy, cy] = at::lstm(a[0], slice(a, 1, 2), slice(a, 3, params.size()), has_biases, num_layers, dropout,
                                  train, bidirectional, batch_first);
    return std::vector<at::Tensor>{out, hy, cy};
  });
  return {r[0], r[1], r[2]};
}

// Packed sequences: batch_sizes stays on the CPU, as PyTorch keeps it.
std::tuple<at::Tensor, at::Tensor, at::Tensor> lstm_data(const at::Tensor& data, const at::Tensor& batch_sizes,
                                                         at::TensorList hx, at::TensorList params, bool has_biases,
                                                         int64_t num_layers, double dropout, bool train,
                                                         bool bidirectional) {
  std::vector<at::Tensor> args = flat({data, hx, params});
  if (hx.size() != 2 || !whole_sequence(g_lstm_data, args)) {
    return at::native::lstm(data, batch_sizes, hx, params, has_biases, num_layers, dropout, train, bidirectional);
  }
  auto r = run_whole_sequence("aten::lstm", "LstmBackward", args, dropout > 0 && train, [&](const auto& a) {
    auto [out, hy, cy] = at::lstm(a[0], batch_sizes, slice(a, 1, 2), slice(a, 3, params.size()), has_biases,
                                  num_layers, dropout, train, bidirectional);
    return std::vector<at::Tensor>{out, hy, cy};
  });
  return {r[0], r[1], r[2]};
}

// gru, rnn_tanh and rnn_relu share one signature (one hidden state).
using OneHiddenInput = std::tuple<at::Tensor, at::Tensor> (*)(const at::Tensor&, const at::Tensor&, at::TensorList,
                                                              bool, int64_t, double, bool, bool, bool);
using OneHiddenData = std::tuple<at::Tensor, at::Tensor> (*)(const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                                             at::TensorList, bool, int64_t, double, bool, bool);

template <Supported* supported, OneHiddenInput composite, OneHiddenInput op, const char* name, const char* node>
std::tuple<at::Tensor, at::Tensor> one_hidden_input(const at::Tensor& input, const at::Tensor& hx,
                                                    at::TensorList params, bool has_biases, int64_t num_layers,
                                                    double dropout, bool train, bool bidirectional, bool batch_first) {
  std::vector<at::Tensor> args = flat({input, hx, params});
  if (!whole_sequence(*supported, args)) {
    return composite(input, hx, params, has_biases, num_layers, dropout, train, bidirectional, batch_first);
  }
  auto r = run_whole_sequence(name, node, args, dropout > 0 && train, [&](const auto& a) {
    auto [out, hy] = op(a[0], a[1], slice(a, 2, params.size()), has_biases, num_layers, dropout, train,
                        bidirectional, batch_first);
    return std::vector<at::Tensor>{out, hy};
  });
  return {r[0], r[1]};
}

template <Supported* supported, OneHiddenData composite, OneHiddenData op, const char* name, const char* node>
std::tuple<at::Tensor, at::Tensor> one_hidden_data(const at::Tensor& data, const at::Tensor& batch_sizes,
                                                   const at::Tensor& hx, at::TensorList params, bool has_biases,
                                                   int64_t num_layers, double dropout, bool train, bool bidirectional) {
  std::vector<at::Tensor> args = flat({data, hx, params});
  if (!whole_sequence(*supported, args)) {
    return composite(data, batch_sizes, hx, params, has_biases, num_layers, dropout, train, bidirectional);
  }
  auto r = run_whole_sequence(name, node, args, dropout > 0 && train, [&](const auto& a) {
    auto [out, hy] = op(a[0], batch_sizes, a[1], slice(a, 2, params.size()), has_biases, num_layers, dropout, train,
                        bidirectional);
    return std::vector<at::Tensor>{out, hy};
  });
  return {r[0], r[1]};
}

constexpr char kGru[] = "aten::gru", kGruNode[] = "GruBackward";
constexpr char kTanh[] = "aten::rnn_tanh", kTanhNode[] = "RnnTanhBackward";
constexpr char kRelu[] = "aten::rnn_relu", kReluNode[] = "RnnReluBackward";

constexpr auto gru_input = &one_hidden_input<&g_gru_input, &at::native::gru, &at::gru, kGru, kGruNode>;
constexpr auto gru_data = &one_hidden_data<&g_gru_data, &at::native::gru, &at::gru, kGru, kGruNode>;
constexpr auto tanh_input = &one_hidden_input<&g_tanh_input, &at::native::rnn_tanh, &at::rnn_tanh, kTanh, kTanhNode>;
constexpr auto tanh_data = &one_hidden_data<&g_tanh_data, &at::native::rnn_tanh, &at::rnn_tanh, kTanh, kTanhNode>;
constexpr auto relu_input = &one_hidden_input<&g_relu_input, &at::native::rnn_relu, &at::rnn_relu, kRelu, kReluNode>;
constexpr auto relu_data = &one_hidden_data<&g_relu_data, &at::native::rnn_relu, &at::rnn_relu, kRelu, kReluNode>;

void register_whole_sequence(torch::Library& m) {
  m.impl("lstm.input", TORCH_FN(lstm_input));
  m.impl("lstm.data", TORCH_FN(lstm_data));
  m.impl("gru.input", TORCH_FN(gru_input));
  m.impl("gru.data", TORCH_FN(gru_data));
  m.impl("rnn_tanh.input", TORCH_FN(tanh_input));
  m.impl("rnn_tanh.data", TORCH_FN(tanh_data));
  m.impl("rnn_relu.input", TORCH_FN(relu_input));
  m.impl("rnn_relu.data", TORCH_FN(relu_data));
}

}  // namespace

// Below autograd too: under inference mode the autograd keys are skipped, and the composite
// would run cell by cell.
TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  register_whole_sequence(m);
}

TORCH_LIBRARY_IMPL(aten, AutogradPrivateUse1, m) {
  register_whole_sequence(m);
}

}  // namespace devx::ops
