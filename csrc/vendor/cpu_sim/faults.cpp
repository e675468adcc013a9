#include "faults.h"

#include <atomic>
#include <cstdlib>

#include "common/text_parse.h"
#include "error.h"
#include "runtime.h"

namespace devx::cpu_sim {
namespace {

constexpr std::array<const char*, static_cast<size_t>(FaultCall::kCount)> kCallNames = {"malloc", "memcpy",
                                                                                    "kernel"};

std::array<std::atomic<uint64_t>, static_cast<size_t>(FaultCall::kCount)> g_calls{};

// splitmix64: a well-mixed number from the call's number, so that failures at a rate do not
// depend on which thread made the call.
double uniform(uint64_t n, uint64_t salt) {
  uint64_t z = n * 0x9E3779B97F4A7C15ull + salt;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return static_cast<double>(z >> 11) * 0x1p-53;
}

}  // namespace

bool parse_faults(const std::string& spec, FaultRules* out, std::string* why) {
  FaultRules rules{};
  for (const std::string& item : text::split_list(spec)) {
    const size_t colon = item.find(':');
    const std::string name = item.substr(0, colon);
    size_t call = 0;
    while (call < kCallNames.size() && name != kCallNames[call]) ++call;
    if (colon == std::string::npos || call == kCallNames.size()) {
      *why = "has '" + item + "'; use CALL:RATE or CALL:#N with CALL one of malloc, memcpy, kernel";
      return false;
    }
    const std::string value = item.substr(colon + 1);
    char* end = nullptr;
    if (!value.empty() && value[0] == '#') {
      const unsigned long long nth = std::strtoull(value.c_str() + 1, &end, 10);
      if (value.size() < 2 || *end != '\0' || nth == 0) {
        *why = "has '" + item + "'; #N names the N-th call, N >= 1";
        return false;
      }
      rules[call].nth = nth;
    } else {
      const double rate = std::strtod(value.c_str(), &end);
      if (value.empty() || *end != '\0' || !(rate > 0 && rate <= 1)) {
        *why = "has '" + item + "'; a rate is a number above 0 and at most 1";
        return false;
      }
      rules[call].rate = rate;
    }
  }
  *out = rules;
  return true;
}

bool faults_injected(FaultCall call) {
  return Runtime::get().settings().faults[static_cast<size_t>(call)].active();
}

DevxStatus injected_fault(FaultCall call) {
  const FaultRule& rule = Runtime::get().settings().faults[static_cast<size_t>(call)];
  if (!rule.active()) return DEVX_OK;
  const uint64_t n = ++g_calls[static_cast<size_t>(call)];
  const bool fails = n == rule.nth || (rule.rate > 0 && uniform(n, static_cast<uint64_t>(call)) < rule.rate);
  if (!fails) return DEVX_OK;
  return fail(DEVX_ERROR, std::string("cpu_sim ") + kCallNames[static_cast<size_t>(call)] + ": injected fault (call " +
                              std::to_string(n) + ", DEVX_SIM_FAULTS)");
}

}  // namespace devx::cpu_sim
