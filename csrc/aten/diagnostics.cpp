#include "aten/diagnostics.h"

#include <ATen/core/Tensor.h>
#include <ATen/ops/_to_copy.h>

#include <array>
#include <limits>
#include <mutex>
#include <optional>
#include <regex>
#include <unordered_map>
#include <unordered_set>

#include "aten/async_ops.h"
#include "aten/autocompare.h"
#include "aten/cpu_fallback.h"
#include "aten/op_dump.h"
#include "aten/op_registry.h"
#include "profiler/device_activity.h"
#include "runtime/stream.h"
#include "runtime/vendor.h"
#include "runtime/log.h"
#include "runtime/op_origin.h"
#include "runtime/python_hooks.h"
#include "runtime/sanitizer.h"
#include "common/text_parse.h"
#include "runtime/settings.h"

namespace devx::diag {

std::atomic<uint32_t> g_gate{1};

namespace {

constexpr uint32_t kStale = 1u << 0;
constexpr uint32_t kOn = 1u << 1;

enum Flag : uint8_t { kForce = 1, kCompare = 2, kOverride = 4, kHook = 8, kSanitize = 16 };

struct Settings {
  std::vector<std::string> force_patterns;
  std::vector<std::regex> force;
  int dump_level = 0;
  int64_t dump_max_elements = 16;
  bool compare_all = false;
  std::vector<std::regex> compare;
  bool compare_raise = false;
  bool sanitize = false;  // DEVX_SIM_SANITIZE: check the guard zones of each op's tensors
};

std::mutex g_mutex;
Settings g_settings;
std::unordered_set<std::string> g_overrides;
OpHook g_op_hook;
std::vector<std::regex> g_hook_patterns;
OverrideRunner g_override_runner;
// Per generated op; atomics because ops on other threads read them while a refresh rewrites them.
std::array<std::atomic<uint8_t>, gen::kNumOps> g_flags{};
std::atomic<int> g_dump_level{0};
std::atomic<int64_t> g_dump_max_elements{16};
// Flags of copy_, which is hand-written rather than generated (intercepts_copy()).
std::atomic<uint8_t> g_copy_flags{0};
// Flags of other ops (long tail, by operator name), computed on first use after each refresh.
std::unordered_map<c10::OperatorName, uint8_t> g_flag_cache;
// Ops whose forced fallback has been confirmed in the log (under g_mutex).
std::unordered_set<std::string> g_confirmed_forced;
// Set while the slow path calls back into the op's own wrapper for its native kernel.
thread_local bool t_bypass = false;
// Above zero while the diagnostics do their own device work (reading values to dump, copying
// arguments to the CPU to compare or to fall back): the copies they make are not the user's ops.
thread_local int t_quiet = 0;

// Op names as the dump and the profiler print them ("aten::addmm") and as torch.ops spells a
// default overload ("_softmax.default") name the ops this backend calls "addmm" and "_softmax".
std::string normalize_pattern(std::string pattern) {
  constexpr std::string_view kNamespace = "aten::";
  constexpr std::string_view kDefault = ".default";
  if (pattern.rfind(kNamespace, 0) == 0) pattern.erase(0, kNamespace.size());
  if (pattern.size() > kDefault.size() &&
      pattern.compare(pattern.size() - kDefault.size(), kDefault.size(), kDefault) == 0) {
    pattern.erase(pattern.size() - kDefault.size());
  }
  return pattern;
}

std::vector<std::string> split_patterns(const std::string& spec) {
  std::vector<std::string> out = text::split_list(spec, " \t'\"");  // quotes as a shell user may leave them
  for (std::string& pattern : out) pattern = normalize_pattern(pattern);
  return out;
}

std::regex compile(const char* variable, const std::string& pattern) {
  try {
    return std::regex(pattern, std::regex::ECMAScript | std::regex::optimize);
  } catch (const std::regex_error& e) {
    TORCH_CHECK_VALUE(false, variable, ": '", pattern, "' is not a valid regular expression (", e.what(), ")");
  }
}

std::vector<std::regex> compile_all(const char* variable, const std::vector<std::string>& patterns) {
  std::vector<std::regex> out;
  for (const auto& p : patterns) out.push_back(compile(variable, p));
  return out;
}

bool matches(const std::vector<std::regex>& res, const std::string& overload) {
  if (res.empty()) return false;
  std::string base = overload.substr(0, overload.find('.'));
  for (const auto& re : res) {
    if (std::regex_match(overload, re) || std::regex_match(base, re)) return true;
  }
  return false;
}

uint8_t flags_of(const Settings& s, const std::string& overload) {
  uint8_t f = 0;
  if (matches(s.force, overload)) f |= kForce;
  if (s.compare_all || matches(s.compare, overload)) f |= kCompare;
  if (g_overrides.count(overload)) f |= kOverride;
  if (g_op_hook && matches(g_hook_patterns, overload)) f |= kHook;
  if (s.sanitize) f |= kSanitize;
  return f;
}

void refresh_locked() {
  Settings s;
  using settings::Id;
  s.force_patterns = split_patterns(settings::get_text(Id::DIPU_FORCE_FALLBACK_OPS_LIST));
  s.force = compile_all("DIPU_FORCE_FALLBACK_OPS_LIST", s.force_patterns);
  s.dump_level = static_cast<int>(settings::get_int(Id::DIPU_DUMP_OP_ARGS));
  s.dump_max_elements = settings::get_int(Id::DEVX_DUMP_OP_ARGS_MAX_ELEMENTS);
  s.compare_all = settings::get_bool(Id::DIPU_AUTOCOMPARE);
  s.compare = compile_all("DIPU_AUTOCOMPARE_OPS_LIST", split_patterns(settings::get_text(Id::DIPU_AUTOCOMPARE_OPS_LIST)));
  s.compare_raise = settings::get_bool(Id::DIPU_AUTOCOMPARE_RAISE);
  s.sanitize = settings::get_bool(Id::DEVX_SIM_SANITIZE);
  bool any = s.dump_level > 0 || !g_overrides.empty() || g_op_hook != nullptr || profiler::recording();
  for (int i = 0; i < gen::kNumOps; ++i) {
    uint8_t f = flags_of(s, op_overload_name(i));
    any = any || f != 0;
    g_flags[i].store(f, std::memory_order_relaxed);
  }
  any = any || !s.force.empty() || s.compare_all || !s.compare.empty();
  g_copy_flags.store(flags_of(s, "copy_"), std::memory_order_relaxed);
  g_dump_level.store(s.dump_level, std::memory_order_relaxed);
  g_dump_max_elements.store(s.dump_max_elements, std::memory_order_relaxed);
  op_origin::observe(op_origin::Client::kDump, s.dump_level > 0);
  if (s.force_patterns != g_settings.force_patterns) g_confirmed_forced.clear();
  g_settings = std::move(s);
  g_flag_cache.clear();
  g_gate.store(any ? kOn : 0, std::memory_order_relaxed);
}

void refresh_if_stale() {
  if (g_gate.load(std::memory_order_relaxed) & kStale) {
    std::lock_guard<std::mutex> lock(g_mutex);
    if (g_gate.load(std::memory_order_relaxed) & kStale) refresh_locked();
  }
}

uint8_t flags_for(const c10::OperatorHandle& op) {
  int index = op_index(op.operator_name());
  if (index >= 0) return g_flags[index].load(std::memory_order_relaxed);
  std::lock_guard<std::mutex> lock(g_mutex);
  auto it = g_flag_cache.find(op.operator_name());
  if (it == g_flag_cache.end()) {
    it = g_flag_cache.emplace(op.operator_name(), flags_of(g_settings, overload_name(op.operator_name()))).first;
  }
  return it->second;
}

// The data of every devx tensor among `values` (tensors, lists, optional tensors).
template <typename It>
void collect_storages(It begin, It end, std::vector<const void*>* out) {
  auto add = [&](const at::Tensor& t) {
    if (t.defined() && t.device().type() == c10::DeviceType::PrivateUse1 && t.has_storage() && t.storage().data()) {
      out->push_back(t.storage().data());
    }
  };
  for (It it = begin; it != end; ++it) {
    const c10::IValue& v = *it;
    if (v.isTensor()) {
      add(v.toTensor());
    } else if (v.isTensorList()) {
      for (const at::Tensor& t : v.toTensorList()) add(t);
    } else if (v.isList()) {
      for (const c10::IValue& e : v.toListRef()) {
        if (e.isTensor()) add(e.toTensor());
      }
    }
  }
}

void slow_path_fn(const c10::OperatorHandle& op, c10::DispatchKeySet ks, torch::jit::Stack* stack) {
  run(op, ks, stack, [&](torch::jit::Stack* s) {
    t_bypass = true;
    try {
      op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::PrivateUse1), s);
    } catch (...) {
      t_bypass = false;
      throw;
    }
    t_bypass = false;
  });
}

struct Init {
  Init() {
    profiler::add_recording_listener([] { g_gate.fetch_or(kStale, std::memory_order_relaxed); });
  }
};
Init g_init;

// Set by the first refresh(), at module initialisation: before it, the op tables and the other
// clients of a refresh may not exist yet (static initialisation).
std::atomic<bool> g_ready{false};

// A diagnostics setting changed: applied now, before the next op starts (a dump switched on must
// see that op's autograd node made), and a bad pattern is a ValueError where it was set.
void on_setting_change() {
  if (!g_ready.load(std::memory_order_acquire)) {
    g_gate.fetch_or(kStale, std::memory_order_relaxed);
    return;
  }
  std::lock_guard<std::mutex> lock(g_mutex);
  refresh_locked();
}

settings::Watch g_watch({settings::Id::DIPU_FORCE_FALLBACK_OPS_LIST, settings::Id::DIPU_DUMP_OP_ARGS,
                         settings::Id::DEVX_DUMP_OP_ARGS_MAX_ELEMENTS, settings::Id::DIPU_AUTOCOMPARE,
                         settings::Id::DIPU_AUTOCOMPARE_OPS_LIST, settings::Id::DIPU_AUTOCOMPARE_RAISE,
                         settings::Id::DEVX_SIM_SANITIZE},
                        &on_setting_change);

// "forced to the CPU: addmm.out (pattern 'addmm')", once per op and pattern list: the user sees
// that a pattern took effect, and which of several did.
void confirm_forced(const std::string& name) {
  std::string pattern;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    if (!g_confirmed_forced.insert(name).second) return;
    const std::string base = name.substr(0, name.find('.'));
    for (size_t i = 0; i < g_settings.force.size(); ++i) {
      if (std::regex_match(name, g_settings.force[i]) || std::regex_match(base, g_settings.force[i])) {
        pattern = g_settings.force_patterns[i];
        break;
      }
    }
  }
  log::warn(log::Module::FALLBACK, "forced to the CPU: " + name + " (DIPU_FORCE_FALLBACK_OPS_LIST pattern '" +
                                       pattern + "')");
}

// Where the user's program issued the op: its line; for an op of the backward pass, the line of
// the forward op whose node runs, and the node.
std::string issued_at() {
  const op_origin::Current current = op_origin::current();
  if (!current.backward) return python_site().str();
  const std::string forward = current.forward.str();
  return (forward.empty() ? std::string("?") : forward) + " (backward: " + *current.op + ")";
}

}  // namespace

std::string overload_name(const c10::OperatorName& n) {
  std::string name = n.name.substr(n.name.find("::") + 2);
  if (!n.overload_name.empty()) name += "." + n.overload_name;
  return name;
}

bool intercepts(int op) {
  if (t_bypass) {
    // The native call the slow path made: run it, and let nested ops be intercepted again.
    t_bypass = false;
    return false;
  }
  // Issued work, and ops run inline after issuing, went through the diagnostics when issued.
  if (async::t_inline_depth > 0) return false;
  refresh_if_stale();
  return g_flags[op].load(std::memory_order_relaxed) != 0 || g_dump_level.load(std::memory_order_relaxed) > 0 ||
         profiler::recording();
}

const c10::BoxedKernel& slow_path() {
  static const c10::BoxedKernel kernel = c10::BoxedKernel::makeFromFunction<&slow_path_fn>();
  return kernel;
}

QuietScope::QuietScope() {
  ++t_quiet;
}

QuietScope::~QuietScope() {
  --t_quiet;
}

bool quiet() {
  return t_quiet > 0;
}

bool intercepts_copy() {
  if (t_quiet > 0 || async::t_inline_depth > 0) return false;
  refresh_if_stale();
  return g_copy_flags.load(std::memory_order_relaxed) != 0 || g_dump_level.load(std::memory_order_relaxed) > 0;
}

void run(const c10::OperatorHandle& op, c10::DispatchKeySet ks, torch::jit::Stack* stack, const NativeRunner& native,
         DeviceActivity activity) {
  if (!gate_open()) {
    native(stack);
    return;
  }
  refresh_if_stale();
  const uint8_t flags = flags_for(op);
  const DumpStyle dump{g_dump_level.load(std::memory_order_relaxed),
                       g_dump_max_elements.load(std::memory_order_relaxed)};
  const std::string name = overload_name(op.operator_name());
  const char* kernel = (flags & kForce) ? "cpu fallback (forced)" : (flags & kOverride) ? "python override" : "devx";
  if (dump.level > 0) {
    QuietScope quiet;
    dump_args(op, *stack, dump, kernel, issued_at());
  }
  std::vector<c10::IValue> hooked_args;
  if (flags & (kHook | kSanitize)) {
    const size_t nargs = op.schema().arguments().size();
    hooked_args.assign(stack->end() - static_cast<std::ptrdiff_t>(nargs), stack->end());
  }
  // The kernel (native, fallback or a Python override) and the sanitizer's check after it are
  // device work for the sanitizer, in one scope so the pages the kernel opened stay open for the
  // check; one issued to an async stream is device work until it has run, so it is waited for.
  std::optional<sanitizer::DeviceAccess> device_work;
  if (flags & kSanitize) device_work.emplace();
  if (flags & kForce) {
    confirm_forced(name);
    cpu_fallback(op, ks, stack);
  } else {
    std::optional<CpuReplay> replay;
    if ((flags & kCompare) && comparable(op)) {
      QuietScope quiet;
      replay.emplace(op, *stack);
    }
    if (flags & kOverride) {
      OverrideRunner runner;
      {
        std::lock_guard<std::mutex> lock(g_mutex);
        runner = g_override_runner;
      }
      TORCH_CHECK(runner, "devx: no Python kernel runner installed for the override of ", name);
      runner(name, op, stack);
    } else if (activity == DeviceActivity::kSpan && profiler::recording()) {
      // The kernel's span on the stream it was issued to, for torch.profiler's device rows.
      profiler::DeviceSpan span(profiler::ActivityKind::kKernel, std::string(g_vendor->name) + "::" + name,
                                getCurrentDevxStream());
      native(stack);
      span.finish();
    } else {
      native(stack);
    }
    if (flags & kSanitize) getCurrentDevxStream().synchronize();
    if (replay) {
      bool raise = false;
      {
        std::lock_guard<std::mutex> lock(g_mutex);
        raise = g_settings.compare_raise;
      }
      QuietScope quiet;
      replay->compare(*stack, raise, python_line);
    }
  }
  if (flags & kSanitize) {
    const size_t nret = op.schema().returns().size();
    std::vector<const void*> ptrs;
    collect_storages(hooked_args.begin(), hooked_args.end(), &ptrs);
    collect_storages(stack->end() - static_cast<std::ptrdiff_t>(nret), stack->end(), &ptrs);
    sanitizer::check_pointers(ptrs, "after op " + name);
  }
  device_work.reset();
  if (dump.level > 1) {
    QuietScope quiet;
    dump_results(op, *stack, dump);
  }
  if (flags & kHook) {
    OpHook hook;
    {
      std::lock_guard<std::mutex> lock(g_mutex);
      hook = g_op_hook;
    }
    const size_t nret = op.schema().returns().size();
    std::vector<c10::IValue> results(stack->end() - static_cast<std::ptrdiff_t>(nret), stack->end());
    if (hook) hook(name, hooked_args, results);
  }
}

std::vector<std::string> force_fallback_patterns() {
  std::lock_guard<std::mutex> lock(g_mutex);
  refresh_locked();
  return g_settings.force_patterns;
}

void validate_pattern(const std::string& pattern) {
  compile("DIPU_FORCE_FALLBACK_OPS_LIST", normalize_pattern(pattern));
}

void refresh() {
  std::lock_guard<std::mutex> lock(g_mutex);
  refresh_locked();
  g_ready.store(true, std::memory_order_release);
}

void set_op_hook(OpHook hook, const std::vector<std::string>& patterns) {
  std::vector<std::regex> compiled = compile_all("op hook", patterns);
  std::lock_guard<std::mutex> lock(g_mutex);
  g_op_hook = std::move(hook);
  g_hook_patterns = std::move(compiled);
  refresh_locked();
}

void set_override_runner(OverrideRunner runner) {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_override_runner = std::move(runner);
}

void set_override(const std::string& op, bool on) {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (on) {
    g_overrides.insert(op);
  } else {
    g_overrides.erase(op);
  }
  refresh_locked();
}

}  // namespace devx::diag
