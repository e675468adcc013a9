#include "aten/diagnostics.h"

#include <array>
#include <mutex>
#include <regex>

#include "aten/cpu_fallback.h"
#include "aten/op_registry.h"
#include "runtime/env.h"

namespace devx::diag {

std::atomic<uint32_t> g_gate{1};

namespace {

constexpr uint32_t kStale = 1u << 0;
constexpr uint32_t kForceFallback = 1u << 1;

std::mutex g_mutex;
std::vector<std::string> g_patterns;
// Per generated op; atomics because ops on other threads read it while a refresh rewrites it.
std::array<std::atomic<uint8_t>, gen::kNumOps> g_forced{};
// Set while the slow path calls back into the op's own wrapper for its native kernel.
thread_local bool t_bypass = false;

std::vector<std::string> split_patterns(const std::string& spec) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos <= spec.size()) {
    size_t comma = spec.find(',', pos);
    std::string item = spec.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    pos = comma == std::string::npos ? spec.size() + 1 : comma + 1;
    auto b = item.find_first_not_of(" \t'\"");
    if (b == std::string::npos) continue;
    auto e = item.find_last_not_of(" \t'\"");
    out.push_back(item.substr(b, e - b + 1));
  }
  return out;
}

std::regex compile(const std::string& pattern) {
  try {
    return std::regex(pattern, std::regex::ECMAScript | std::regex::optimize);
  } catch (const std::regex_error& e) {
    TORCH_CHECK_VALUE(false, "DIPU_FORCE_FALLBACK_OPS_LIST: '", pattern, "' is not a valid regular expression (",
                      e.what(), ")");
  }
}

void refresh_locked() {
  std::vector<std::string> patterns = split_patterns(env::get_string("DIPU_FORCE_FALLBACK_OPS_LIST", ""));
  std::vector<std::regex> compiled;
  for (const auto& p : patterns) compiled.push_back(compile(p));
  std::vector<uint8_t> forced(gen::kNumOps, 0);
  bool any = false;
  for (int i = 0; i < gen::kNumOps && !compiled.empty(); ++i) {
    std::string overload = op_overload_name(i);
    std::string base = overload.substr(0, overload.find('.'));
    for (const auto& re : compiled) {
      if (std::regex_match(overload, re) || std::regex_match(base, re)) {
        forced[i] = 1;
        any = true;
        break;
      }
    }
  }
  g_patterns = std::move(patterns);
  for (int i = 0; i < gen::kNumOps; ++i) g_forced[i].store(forced[i], std::memory_order_relaxed);
  g_gate.store(any ? kForceFallback : 0, std::memory_order_relaxed);
}

void slow_path_fn(const c10::OperatorHandle& op, c10::DispatchKeySet ks, torch::jit::Stack* stack) {
  int index = op_index(op.operator_name());
  if (index >= 0 && g_forced[index].load(std::memory_order_relaxed)) {
    cpu_fallback(op, ks, stack);
    return;
  }
  t_bypass = true;
  try {
    op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::PrivateUse1), stack);
  } catch (...) {
    t_bypass = false;
    throw;
  }
  t_bypass = false;
}

struct Init {
  Init() {
    env::add_listener([] { g_gate.fetch_or(kStale, std::memory_order_relaxed); });
  }
};
Init g_init;

}  // namespace

bool intercepts(int op) {
  if (t_bypass) {
    // The native call the slow path made: run it, and let nested ops be intercepted again.
    t_bypass = false;
    return false;
  }
  if (g_gate.load(std::memory_order_relaxed) & kStale) {
    std::lock_guard<std::mutex> lock(g_mutex);
    if (g_gate.load(std::memory_order_relaxed) & kStale) refresh_locked();
  }
  return g_forced[op].load(std::memory_order_relaxed) != 0;
}

const c10::BoxedKernel& slow_path() {
  static const c10::BoxedKernel kernel = c10::BoxedKernel::makeFromFunction<&slow_path_fn>();
  return kernel;
}

std::vector<std::string> force_fallback_patterns() {
  std::lock_guard<std::mutex> lock(g_mutex);
  refresh_locked();
  return g_patterns;
}

void validate_pattern(const std::string& pattern) {
  compile(pattern);
}

void refresh() {
  std::lock_guard<std::mutex> lock(g_mutex);
  refresh_locked();
}

}  // namespace devx::diag
