#include "aten/autocompare.h"

#include <ATen/core/Tensor.h>
#include <ATen/ops/_to_copy.h>
#include <ATen/ops/dequantize.h>
#include <ATen/ops/nested_to_padded_tensor.h>
#include <ATen/ops/abs.h>
#include <ATen/ops/div.h>
#include <ATen/ops/equal.h>
#include <ATen/ops/gt.h>
#include <ATen/ops/isclose.h>
#include <ATen/ops/isfinite.h>
#include <ATen/ops/max.h>
#include <ATen/ops/sub.h>
#include <ATen/ops/where.h>
#include <ATen/ops/zeros_like.h>

#include <mutex>
#include <sstream>

#include "aten/cpu_fallback.h"
#include "aten/diagnostics.h"
#include "aten/op_dump.h"
#include "aten/stack_util.h"
#include "runtime/log.h"

namespace devx::diag {

namespace {

std::mutex g_stats_mutex;
std::map<std::string, std::pair<int64_t, int64_t>> g_stats;

c10::IValue to_cpu(const c10::IValue& v) {
  c10::IValue out = v;
  if (out.isDevice() && out.toDevice().type() != c10::kCPU) return c10::IValue(c10::Device(c10::kCPU));
  map_tensors(out, [](const at::Tensor& t) {
    if (!t.defined()) return t;
    return at::_to_copy(t, t.options().device(c10::kCPU));
  });
  return out;
}

std::pair<double, double> tolerances(c10::ScalarType t) {
  switch (t) {
    case c10::kHalf: return {1e-3, 1e-5};
    case c10::kBFloat16: return {1.6e-2, 1e-5};
    case c10::kFloat:
    case c10::kComplexFloat: return {1.3e-6, 1e-5};
    default: return {1e-7, 1e-7};
  }
}

// Whether devx tensor `d` matches CPU tensor `c`; `detail` says how they differ.
// Sparse, nested and quantized results are compared as the dense tensors they stand for.
at::Tensor comparable_form(const at::Tensor& t) {
  if (t.is_nested()) return at::nested_to_padded_tensor(t, 0);
  if (t.layout() != c10::kStrided) return t.to_dense();
  if (t.is_quantized()) return at::dequantize(t);
  return t;
}

bool same(const at::Tensor& d, const at::Tensor& cpu, std::string* detail) {
  if (!d.defined() || !cpu.defined()) {
    if (d.defined() != cpu.defined()) *detail = "one side undefined";
    return d.defined() == cpu.defined();
  }
  at::Tensor h = comparable_form(d.device().is_cpu() ? d : at::_to_copy(d, d.options().device(c10::kCPU)));
  const at::Tensor c = comparable_form(cpu);
  std::ostringstream os;
  if (h.sizes() != c.sizes() || h.scalar_type() != c.scalar_type()) {
    os << "sizes " << h.sizes() << " " << h.scalar_type() << " vs CPU " << c.sizes() << " " << c.scalar_type();
    *detail = os.str();
    return false;
  }
  if (!at::isFloatingType(c.scalar_type()) && !at::isComplexType(c.scalar_type())) {
    if (at::equal(h, c)) return true;
    *detail = "values differ";
    return false;
  }
  auto [rtol, atol] = tolerances(c.scalar_type());
  if (h.numel() == 0) return true;
  // The measured error, reported for matches too: how far a vendor's kernel is from the CPU's.
  // NaN against NaN and equal infinities count as no error, as isclose(equal_nan) does.
  at::Tensor diff = at::abs(at::sub(h, c)).to(c10::kDouble);
  diff = at::where(at::isfinite(diff), diff, at::zeros_like(diff));
  at::Tensor scale = at::abs(c).to(c10::kDouble);
  at::Tensor rel = at::where(at::gt(scale, 0), at::div(diff, scale), at::zeros_like(diff));
  os << "max abs " << diff.max().item<double>() << ", max rel " << rel.max().item<double>();
  const bool ok = at::isclose(h, c, rtol, atol, /*equal_nan=*/true).all().item<bool>();
  if (!ok) os << " (rtol " << rtol << ", atol " << atol << ")";
  *detail = os.str();
  return ok;
}

bool same_value(const c10::IValue& d, const c10::IValue& c, std::string* detail) {
  if (d.isTensor() && c.isTensor()) return same(d.toTensor(), c.toTensor(), detail);
  if (d.isTensorList() && c.isTensorList()) {
    auto dl = d.toTensorList();
    auto cl = c.toTensorList();
    if (dl.size() != cl.size()) {
      *detail = "list lengths differ";
      return false;
    }
    for (size_t i = 0; i < dl.size(); ++i) {
      if (!same(dl[i], cl[i], detail)) {
        *detail = "[" + std::to_string(i) + "] " + *detail;
        return false;
      }
    }
    return true;
  }
  if (d.isTensor() || c.isTensor() || d.isTensorList() || c.isTensorList()) {
    *detail = "different kinds of value";
    return false;
  }
  return true;  // non-tensor results (scalars, ints) are not compared
}

// The CPU kernel for the arguments' kind: a sparse, nested or quantized argument selects that
// kind's kernel, as the dispatcher would.
c10::DispatchKey cpu_key(const std::vector<c10::IValue>& args) {
  c10::DispatchKey key = c10::DispatchKey::CPU;
  for (const c10::IValue& v : args) {
    for_each_tensor(v, [&](const at::Tensor& t) {
      if (!t.defined()) return;
      if (t.is_sparse()) {
        key = c10::DispatchKey::SparseCPU;
      } else if (t.layout() != c10::kStrided) {
        key = c10::DispatchKey::SparseCsrCPU;
      } else if (t.is_nested()) {
        key = c10::DispatchKey::NestedTensorCPU;
      } else if (t.is_quantized() && key == c10::DispatchKey::CPU) {
        key = c10::DispatchKey::QuantizedCPU;
      }
    });
  }
  return key;
}

bool has_tensors(const c10::IValue& v) {
  return v.isTensor() || v.isTensorList() || v.isOptionalTensorList();
}

}  // namespace

bool comparable(const c10::OperatorHandle& op) {
  for (const auto& arg : op.schema().arguments()) {
    if (is_generator_arg(arg)) return false;
  }
  const std::string& name = op.operator_name().name;
  static const char* const kNondeterministic[] = {"rand", "normal", "bernoulli", "dropout", "multinomial", "uniform",
                                                  "exponential", "geometric", "cauchy", "log_normal", "random",
                                                  "poisson", "rrelu", "empty", "new_empty", "resize"};
  for (const char* word : kNondeterministic) {
    if (name.find(word) != std::string::npos) return false;
  }
  return true;
}

CpuReplay::CpuReplay(const c10::OperatorHandle& op, const torch::jit::Stack& stack) : op_(op) {
  const size_t nargs = op.schema().arguments().size();
  for (size_t i = stack.size() - nargs; i < stack.size(); ++i) {
    devx_args_.push_back(stack[i]);
    cpu_args_.push_back(to_cpu(stack[i]));
  }
}

void CpuReplay::compare(const torch::jit::Stack& stack, bool raise, const std::function<std::string()>& where) {
  const auto& schema = op_.schema();
  const std::string name = overload_name(op_.operator_name());
  torch::jit::Stack cpu_stack(cpu_args_.begin(), cpu_args_.end());
  try {
    cpu_form(op_, &cpu_stack)->redispatchBoxed(c10::DispatchKeySet(cpu_key(cpu_args_)), &cpu_stack);
  } catch (const std::exception& e) {
    log::write(log::Module::OPS, log::Level::WARN, "autocompare: " + name + " could not run on the CPU: " + e.what());
    return;
  }
  std::vector<std::string> failures;
  auto check = [&](const std::string& what, const c10::IValue& d, const c10::IValue& c) {
    std::string detail;
    bool ok = same_value(d, c, &detail);
    // Passes are counted (autocompare_stats, the summary at exit) and logged only at DEBUG: a
    // mismatch must not drown among hundreds of them.
    if (ok) {
      if (!log::enabled(log::Module::OPS, log::Level::DEBUG)) return;
      log::write(log::Module::OPS, log::Level::DEBUG,
                 "autocompare: " + name + " " + what + ": allclose" + (detail.empty() ? "" : ", " + detail));
    } else {
      failures.push_back(what + ": " + detail);
    }
  };
  const auto& returns = schema.returns();
  for (size_t r = 0; r < returns.size(); ++r) {
    const c10::IValue& d = stack[stack.size() - returns.size() + r];
    const c10::IValue& c = cpu_stack[cpu_stack.size() - returns.size() + r];
    if (!has_tensors(d)) continue;
    check(returns[r].name().empty() ? "result" + (returns.size() > 1 ? std::to_string(r) : "") : returns[r].name(), d, c);
  }
  for (size_t i = 0; i < devx_args_.size(); ++i) {
    if (!has_tensors(devx_args_[i])) continue;
    const auto& arg = schema.arguments()[i];
    bool written = argument_written(schema, i);
    // Unwritten arguments: the CPU copy was never modified, so this checks the devx op left its
    // input alone; written ones: both sides were written.
    check(arg.name() + (written ? " (written)" : " (unchanged)"), devx_args_[i], cpu_args_[i]);
  }
  {
    std::lock_guard<std::mutex> lock(g_stats_mutex);
    auto& s = g_stats[name];
    (failures.empty() ? s.first : s.second)++;
  }
  if (!failures.empty() && !raise) {
    std::ostringstream os;
    os << "autocompare: " << name << " on devx differs from the CPU: ";
    for (size_t i = 0; i < failures.size(); ++i) os << (i ? "; " : "") << failures[i];
    std::string at = where();
    if (!at.empty()) os << "; called from " << at;
    log::warn(log::Module::OPS, os.str());
  }
  if (raise && !failures.empty()) {
    std::ostringstream os;
    os << "autocompare: " << name << " on devx differs from the CPU: ";
    for (const auto& f : failures) os << f << "; ";
    os << "\narguments:";
    for (size_t i = 0; i < devx_args_.size(); ++i) {
      os << "\n  " << schema.arguments()[i].name() << ": " << describe(devx_args_[i], DumpStyle{2});
    }
    std::string at = where();
    if (!at.empty()) os << "\ncalled from " << at;
    TORCH_CHECK(false, os.str());
  }
}

std::map<std::string, std::pair<int64_t, int64_t>> autocompare_stats() {
  std::lock_guard<std::mutex> lock(g_stats_mutex);
  return g_stats;
}

void reset_autocompare_stats() {
  std::lock_guard<std::mutex> lock(g_stats_mutex);
  g_stats.clear();
}

}  // namespace devx::diag
