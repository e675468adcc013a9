// The backend's logger, shared with Python (torch_devx's `logging` records come here too): one
// global level plus per-module levels from DEVX_LOG_LEVEL ("WARN" or "WARN,FALLBACK=INFO"),
// written to stderr, or with DEVX_LOG_PATH=dir to dir/devx_<pid>.log.
#pragma once

#include <optional>
#include <string>

namespace devx::log {

enum class Level { TRACE = 0, DEBUG = 1, INFO = 2, WARN = 3, ERROR = 4, OFF = 5 };
enum class Module { RUNTIME = 0, ALLOC, OPS, FALLBACK, TRACE, PROFILE, PYTHON, kCount };

bool enabled(Module m, Level l);
void write(Module m, Level l, const std::string& message);

inline void info(Module m, const std::string& msg) {
  if (enabled(m, Level::INFO)) write(m, Level::INFO, msg);
}
inline void warn(Module m, const std::string& msg) {
  if (enabled(m, Level::WARN)) write(m, Level::WARN, msg);
}

// Parses DEVX_LOG_LEVEL and DEVX_LOG_PATH again; a bad value is a ValueError naming the variable.
void reload();

std::optional<Module> module_named(const std::string& name);

}  // namespace devx::log
