#include "runtime/env.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <mutex>
#include <vector>

#include <c10/util/Exception.h>

namespace devx::env {

namespace {

std::atomic<uint64_t> g_generation{0};

std::mutex& listener_mutex() {
  static std::mutex m;
  return m;
}

std::vector<Listener>& listeners() {
  static std::vector<Listener> l;
  return l;
}

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

std::string trim(const std::string& s) {
  auto b = s.find_first_not_of(" \t\n\r");
  if (b == std::string::npos) return "";
  auto e = s.find_last_not_of(" \t\n\r");
  return s.substr(b, e - b + 1);
}

}  // namespace

std::string get_string(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v ? trim(v) : fallback;
}

bool get_bool(const char* name, bool fallback) {
  std::string v = lower(get_string(name, ""));
  if (v.empty()) return fallback;
  if (v == "1" || v == "true" || v == "on" || v == "yes") return true;
  if (v == "0" || v == "false" || v == "off" || v == "no") return false;
  TORCH_CHECK_VALUE(false, name, "='", v, "' is not a boolean; use 1/0, true/false, on/off or yes/no");
}

int64_t get_int(const char* name, int64_t fallback, int64_t lo, int64_t hi) {
  std::string v = get_string(name, "");
  if (v.empty()) return fallback;
  char* end = nullptr;
  long long parsed = std::strtoll(v.c_str(), &end, 10);
  TORCH_CHECK_VALUE(end && *end == '\0', name, "='", v, "' is not an integer");
  TORCH_CHECK_VALUE(parsed >= lo && parsed <= hi, name, "=", parsed, " is out of range [", lo, ", ", hi, "]");
  return parsed;
}

uint64_t generation() {
  return g_generation.load(std::memory_order_relaxed);
}

void bump_generation() {
  g_generation.fetch_add(1, std::memory_order_relaxed);
  std::vector<Listener> copy;
  {
    std::lock_guard<std::mutex> lock(listener_mutex());
    copy = listeners();
  }
  for (Listener l : copy) l();
}

void add_listener(Listener listener) {
  std::lock_guard<std::mutex> lock(listener_mutex());
  listeners().push_back(listener);
}

}  // namespace devx::env
