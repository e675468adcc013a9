#include "runtime/settings.h"

#include <array>
#include <cstdint>
#include <cstdlib>
#include <mutex>
#include <string_view>
#include <unordered_map>

#include <c10/util/Exception.h>

#include "common/text_parse.h"

namespace devx::settings {

namespace {

enum class Kind { Bool, Int, Text };

struct Spec {
  const char* name;
  Kind kind;
  const char* fallback;
  int64_t lo, hi;
  const char* help;
};

constexpr Spec kSpecs[] = {
#define DEVX_SETTING(NAME, KIND, DEFAULT, LO, HI, HELP) {#NAME, Kind::KIND, DEFAULT, LO, HI, HELP},
#include "runtime/settings_table.h"
#undef DEVX_SETTING
};
constexpr size_t kCount = static_cast<size_t>(Id::kCount);
static_assert(sizeof(kSpecs) / sizeof(kSpecs[0]) == kCount);

// Function-local statics: Watch objects of other translation units register during static
// initialisation, in an order the linker chooses.
struct State {
  std::mutex mutex;
  std::array<std::optional<std::string>, kCount> api;
  std::array<std::vector<Listener>, kCount> listeners;
  std::unordered_map<std::string_view, size_t> index;
};

State& state() {
  static State* s = [] {
    auto* created = new State;  // never destroyed: listeners may run while other statics go away
    for (size_t i = 0; i < kCount; ++i) created->index.emplace(kSpecs[i].name, i);
    return created;
  }();
  return *s;
}

const Spec& spec(Id id) {
  return kSpecs[static_cast<size_t>(id)];
}

// The raw text and where it came from; empty environment values count as unset.
std::pair<std::string, const char*> raw(size_t i) {
  State& s = state();
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    if (s.api[i]) return {*s.api[i], "api"};
  }
  if (const char* env = std::getenv(kSpecs[i].name)) {
    std::string_view text = text::trim(env);
    if (!text.empty()) return {std::string(text), "environment"};
  }
  return {kSpecs[i].fallback, "default"};
}

// A ValueError unless `text` is a value of setting i.
void check(size_t i, const std::string& text) {
  const Spec& sp = kSpecs[i];
  if (sp.kind == Kind::Bool) {
    bool ignored = false;
    TORCH_CHECK_VALUE(text.empty() || text::parse_switch(text, &ignored), sp.name, "='", text,
                      "' is not a boolean; ", text::kSwitchWords);
  } else if (sp.kind == Kind::Int) {
    int64_t ignored = 0;
    TORCH_CHECK_VALUE(text.empty() || text::parse_int(text, sp.lo, sp.hi, &ignored), sp.name, "='", text,
                      "' is not an integer in [", sp.lo, ", ", sp.hi, "]");
  }
}

std::vector<Listener> listeners_of(size_t i) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  return s.listeners[i];
}

void run_listeners(size_t i) {
  for (Listener l : listeners_of(i)) l();
}

size_t index_of(const std::string& name) {
  State& s = state();
  auto it = s.index.find(name);
  TORCH_CHECK_VALUE(it != s.index.end(), "'", name, "' is not a torch_devx setting");
  return it->second;
}

}  // namespace

Id id_of(const std::string& name) {
  return static_cast<Id>(index_of(name));
}

bool get_bool(Id id) {
  auto [text, source] = raw(static_cast<size_t>(id));
  bool value = false;
  if (text::parse_switch(text, &value)) return value;
  check(static_cast<size_t>(id), text);  // throws with the message
  text::parse_switch(spec(id).fallback, &value);
  return value;
}

int64_t get_int(Id id) {
  const size_t i = static_cast<size_t>(id);
  auto [text, source] = raw(i);
  int64_t value = 0;
  if (text::parse_int(text, kSpecs[i].lo, kSpecs[i].hi, &value)) return value;
  check(i, text);
  text::parse_int(kSpecs[i].fallback, kSpecs[i].lo, kSpecs[i].hi, &value);
  return value;
}

std::string get_text(Id id) {
  return raw(static_cast<size_t>(id)).first;
}

Watch::Watch(std::initializer_list<Id> ids, Listener reload) {
  {
    State& s = state();
    std::lock_guard<std::mutex> lock(s.mutex);
    for (Id id : ids) s.listeners[static_cast<size_t>(id)].push_back(reload);
  }
  try {
    reload();
  } catch (const std::exception&) {
    // Static initialisation cannot report it; validate_all() raises it at import.
  }
}

void set(const std::string& name, const std::optional<std::string>& value) {
  const size_t i = index_of(name);
  std::optional<std::string> text;
  if (value) text = std::string(text::trim(*value));
  if (text) check(i, *text);
  State& s = state();
  std::optional<std::string> previous;
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    previous = s.api[i];
    s.api[i] = text;
  }
  try {
    run_listeners(i);
  } catch (...) {
    {
      std::lock_guard<std::mutex> lock(s.mutex);
      s.api[i] = previous;
    }
    run_listeners(i);
    throw;
  }
}

void environment_changed(const std::string& name) {
  State& s = state();
  auto it = s.index.find(name);
  if (it == s.index.end()) return;
  const size_t i = it->second;
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    s.api[i].reset();
  }
  check(i, raw(i).first);
  run_listeners(i);
}

void validate_all() {
  std::vector<Listener> all;
  for (size_t i = 0; i < kCount; ++i) {
    check(i, raw(i).first);
    for (Listener l : listeners_of(i)) {
      bool seen = false;
      for (Listener a : all) seen = seen || a == l;
      if (!seen) all.push_back(l);
    }
  }
  for (Listener l : all) l();
}

std::vector<Entry> list() {
  std::vector<Entry> out;
  for (size_t i = 0; i < kCount; ++i) {
    auto [text, source] = raw(i);
    out.push_back({kSpecs[i].name, text, source, kSpecs[i].help});
  }
  return out;
}

}  // namespace devx::settings
