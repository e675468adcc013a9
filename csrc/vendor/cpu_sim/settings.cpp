#include "settings.h"

#include <cctype>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>

#include "error.h"

namespace devx::cpu_sim {
namespace {

std::string_view trim(std::string_view text) {
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.front()))) {
    text.remove_prefix(1);
  }
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) {
    text.remove_suffix(1);
  }
  return text;
}

std::string lower(std::string_view text) {
  std::string out(text);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

DevxStatus bad(const char* name, const char* value, const std::string& why) {
  return fail(DEVX_ERROR_INVALID, std::string(name) + "='" + value + "' " + why);
}

// Digits only: "2.5" or "0x2" devices is a typo worth reporting, not something to round.
bool parse_count(std::string_view text, long* out) {
  if (text.empty() || text.size() > 9) return false;
  long value = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return false;
    value = value * 10 + (c - '0');
  }
  *out = value;
  return true;
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

bool parse_switch(std::string_view text, bool* out) {
  const std::string word = lower(text);
  if (word == "1" || word == "true" || word == "on" || word == "yes") {
    *out = true;
  } else if (word == "0" || word == "false" || word == "off" || word == "no") {
    *out = false;
  } else {
    return false;
  }
  return true;
}

}  // namespace

DevxStatus read_settings(Settings* out) {
  Settings settings;

  if (const char* raw = std::getenv("DEVX_SIM_DEVICES"); raw && !trim(raw).empty()) {
    long count = 0;
    if (!parse_count(trim(raw), &count) || count < 1 || count > kMaxDevices) {
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
    if (!parse_switch(trim(raw), &settings.async)) {
      return bad("DEVX_SIM_ASYNC", raw, "is not a switch; use 0/1, true/false or on/off");
    }
  }

  for (const char* name : {"DEVX_SIM_UNSUPPORTED_OPS", "DEVX_SIM_FAULTY_KERNELS"}) {
    const char* raw = std::getenv(name);
    if (!raw || trim(raw).empty()) continue;
    std::vector<std::regex>& patterns =
        std::string_view(name) == "DEVX_SIM_UNSUPPORTED_OPS" ? settings.unsupported_ops : settings.faulty_kernels;
    std::string spec = raw;
    size_t pos = 0;
    while (pos <= spec.size()) {
      size_t comma = spec.find(',', pos);
      std::string item(trim(std::string_view(spec).substr(pos, comma == std::string::npos ? std::string::npos : comma - pos)));
      pos = comma == std::string::npos ? spec.size() + 1 : comma + 1;
      if (item.empty()) continue;
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
    long count = 0;
    if (!parse_count(trim(raw), &count) || count < 0 || count > 1024) {
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
