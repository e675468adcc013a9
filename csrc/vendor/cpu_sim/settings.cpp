#include "settings.h"

#include <cctype>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>

#include "common/text_parse.h"
#include "error.h"

namespace devx::cpu_sim {
namespace {

using text::lower;
using text::trim;

DevxStatus bad(const char* name, const char* value, const std::string& why) {
  return fail(DEVX_ERROR_INVALID, std::string(name) + "='" + value + "' " + why);
}

// Multiplier for a size suffix. Every unit is binary, KB included: device memory is sized in
// powers of two, and a "16GB" card holds 16 GiB.
bool suffix_multiplier(const std::string& suffix, double* out) {
  static const char* const kPrefixes = "kmgt";
  if (suffix.empty() || suffix == "b") {
    *out = 1;
    return true;
  }
  const char* prefix = std::strchr(kPrefixes, suffix[0]);
  if (prefix == nullptr) return false;
  std::string_view rest(suffix.data() + 1, suffix.size() - 1);
  if (rest != "" && rest != "b" && rest != "ib") return false;
  *out = static_cast<double>(uint64_t{1} << (10 * (prefix - kPrefixes + 1)));
  return true;
}

// "8GiB", "1.5g", "4096": a decimal number and an optional unit. Returns false when the text is
// not a size at all; *out is then untouched.
bool parse_size(std::string_view text, double* out) {
  size_t end = 0;
  bool digits = false;
  while (end < text.size() && std::isdigit(static_cast<unsigned char>(text[end]))) {
    ++end;
    digits = true;
  }
  if (end < text.size() && text[end] == '.') {
    ++end;
    while (end < text.size() && std::isdigit(static_cast<unsigned char>(text[end]))) {
      ++end;
      digits = true;
    }
  }
  double multiplier = 0;
  if (!digits || !suffix_multiplier(lower(trim(text.substr(end))), &multiplier)) return false;
  *out = std::strtod(std::string(text.substr(0, end)).c_str(), nullptr) * multiplier;
  return true;
}

}  // namespace

DevxStatus read_settings(Settings* out) {
  Settings settings;

  if (const char* raw = std::getenv("DEVX_SIM_DEVICES"); raw && !trim(raw).empty()) {
    int64_t count = 0;
    if (!text::parse_int(raw, 1, kMaxDevices, &count)) {
      return bad("DEVX_SIM_DEVICES", raw,
                 "is not a device count; use an integer from 1 to " + std::to_string(kMaxDevices));
    }
    settings.devices = static_cast<int>(count);
  }

  if (const char* raw = std::getenv("DEVX_SIM_MEMORY"); raw && !trim(raw).empty()) {
    double bytes = 0;
    if (!parse_size(trim(raw), &bytes)) {
      return bad("DEVX_SIM_MEMORY", raw,
                 "is not a size; use bytes or a K/M/G/T suffix such as 8GiB");
    }
    // The upper bound is what a pointer can address; whether the address space really has room
    // for every device's reservation is only known when each arena is mapped.
    if (bytes < 1 || bytes >= 0x1p63) {
      return bad("DEVX_SIM_MEMORY", raw,
                 "is out of range; use a size from 1 byte to 8EiB per device, such as 8GiB");
    }
    settings.memory = static_cast<size_t>(bytes);
  }

  if (const char* raw = std::getenv("DEVX_SIM_ASYNC"); raw && !trim(raw).empty()) {
    if (!text::parse_switch(raw, &settings.async)) {
      return bad("DEVX_SIM_ASYNC", raw, std::string("is not a switch; ") + text::kSwitchWords);
    }
  }

  for (const char* name : {"DEVX_SIM_UNSUPPORTED_OPS", "DEVX_SIM_FAULTY_KERNELS"}) {
    const char* raw = std::getenv(name);
    if (!raw || trim(raw).empty()) continue;
    std::vector<std::regex>& patterns =
        std::string_view(name) == "DEVX_SIM_UNSUPPORTED_OPS" ? settings.unsupported_ops : settings.faulty_kernels;
    for (const std::string& item : text::split_list(raw)) {
      try {
        patterns.emplace_back(item, std::regex::ECMAScript | std::regex::optimize);
      } catch (const std::regex_error& e) {
        return bad(name, raw, "has '" + item + "', which is not a regular expression (" + e.what() + ")");
      }
    }
  }

  if (const char* raw = std::getenv("DEVX_SIM_KERNELS"); raw && !trim(raw).empty()) {
    const std::string_view v = trim(raw);
    if (v == "aten") {
      settings.kernels = Settings::Kernels::kAten;
    } else if (v == "own") {
      settings.kernels = Settings::Kernels::kOwn;
    } else if (v == "own-only") {
      settings.kernels = Settings::Kernels::kOwnOnly;
    } else {
      return bad("DEVX_SIM_KERNELS", raw, "is not a kernel source; use aten, own or own-only");
    }
  }

  if (const char* raw = std::getenv("DEVX_SIM_THREADS"); raw && !trim(raw).empty()) {
    int64_t count = 0;
    if (!text::parse_int(raw, 0, 1024, &count)) {
      return bad("DEVX_SIM_THREADS", raw, "is not a thread count; use an integer from 1 to 1024 (0: one per core)");
    }
    settings.threads = static_cast<int>(count);
  }

  if (const char* raw = std::getenv("DEVX_SIM_FAULTS"); raw && !trim(raw).empty()) {
    std::string why;
    if (!parse_faults(std::string(trim(raw)), &settings.faults, &why)) return bad("DEVX_SIM_FAULTS", raw, why);
    if (settings.faults[static_cast<size_t>(FaultCall::kKernel)].active() && settings.kernels == Settings::Kernels::kAten) {
      return bad("DEVX_SIM_FAULTS", raw,
                 "asks for kernel faults, but DEVX_SIM_KERNELS=aten (the default) runs ATen's kernels, not cpu_sim's; "
                 "set DEVX_SIM_KERNELS=own or own-only");
    }
  }

  *out = settings;
  return DEVX_OK;
}

}  // namespace devx::cpu_sim
