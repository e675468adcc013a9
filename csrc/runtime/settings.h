// The settings registry: each setting declared once (settings_table.h), parsed by one set of
// parsers (common/text_parse.h), with listeners per setting.
//
// A setting's value is, in order: the value last set through the Python API, the environment,
// the declared default. A write to the environment (os.environ, seen by the package) or through
// the API validates the new value — a ValueError naming the variable, the value and what is
// allowed — and runs only that setting's listeners; a write to a variable that is no setting
// costs nothing. The API never writes the environment, so children see only what the user put
// there; an environment write replaces an earlier API value (the last write wins).
#pragma once

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <vector>

namespace devx::settings {

enum class Id : int {
#define DEVX_SETTING(NAME, KIND, DEFAULT, LO, HI, HELP) NAME,
#include "runtime/settings_table.h"
#undef DEVX_SETTING
  kCount
};

// The setting named `name`; a ValueError when there is none.
Id id_of(const std::string& name);

bool get_bool(Id id);
int64_t get_int(Id id);
std::string get_text(Id id);

using Listener = void (*)();

// `reload` runs now (a bad value is then reported by validate_all() at import) and after every
// change of one of `ids`; its ValueErrors reach whoever made the change.
struct Watch {
  Watch(std::initializer_list<Id> ids, Listener reload);
};

// Set through the API (nullopt: back to the environment or default). Validated first; when a
// listener rejects the value, the previous one is restored and the error rethrown.
void set(const std::string& name, const std::optional<std::string>& value);
// The environment variable `name` was written or removed. Not a setting: nothing happens.
void environment_changed(const std::string& name);
// Every setting parsed and every listener run: the first bad value is a ValueError (at import).
void validate_all();

struct Entry {
  std::string name, value, source, help;  // source: "default", "environment" or "api"
};
std::vector<Entry> list();

}  // namespace devx::settings
