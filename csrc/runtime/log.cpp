#include "runtime/log.h"

#include <fcntl.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <atomic>
#include <cstdio>
#include <mutex>

#include <c10/util/Exception.h>

#include "common/text_parse.h"
#include "runtime/settings.h"

namespace devx::log {

namespace {

constexpr size_t kModules = static_cast<size_t>(Module::kCount);
constexpr std::array<const char*, kModules> kModuleNames = {"RUNTIME", "ALLOC", "OPS", "FALLBACK",
                                                            "TRACE", "PROFILE", "PYTHON"};
constexpr std::array<const char*, 6> kLevelNames = {"TRACE", "DEBUG", "INFO", "WARN", "ERROR", "OFF"};

std::array<std::atomic<int>, kModules> g_levels;
std::mutex g_write_mutex;
FILE* g_file = nullptr;  // DEVX_LOG_PATH's file for this process; stderr when null
std::string g_file_dir;

Level parse_level(const std::string& s, const std::string& whole) {
  std::string u = text::upper(text::trim(s));
  if (u == "WARNING") u = "WARN";
  for (size_t i = 0; i < kLevelNames.size(); ++i) {
    if (u == kLevelNames[i]) return static_cast<Level>(i);
  }
  TORCH_CHECK_VALUE(false, "DEVX_LOG_LEVEL='", whole, "': '", s,
                    "' is not a level; use TRACE, DEBUG, INFO, WARN, ERROR or OFF");
}

struct Init {
  Init() {
    for (auto& l : g_levels) l.store(static_cast<int>(Level::WARN));
  }
};
Init g_init;

// <dir>/devx_<pid>.log, opened for appending; `dir` is created if missing. Anything in the way
// is a ValueError naming DEVX_LOG_PATH: a log that cannot be written must not lose its lines
// silently. A link planted in the log file's place is not followed.
FILE* open_log_file(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  TORCH_CHECK_VALUE(!ec, "DEVX_LOG_PATH='", dir, "': cannot create the folder (", ec.message(), ")");
  TORCH_CHECK_VALUE(std::filesystem::is_directory(dir, ec), "DEVX_LOG_PATH='", dir, "' is not a folder");
  std::string path = dir + "/devx_" + std::to_string(::getpid()) + ".log";
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_NOFOLLOW | O_CLOEXEC, 0644);
  const int error = errno;
  TORCH_CHECK_VALUE(fd >= 0, "DEVX_LOG_PATH='", dir, "': cannot open ", path, " for writing (",
                    error == ELOOP ? std::string("it is a symbolic link") : std::string(std::strerror(error)), ")");
  FILE* file = ::fdopen(fd, "a");
  if (!file) ::close(fd);
  TORCH_CHECK_VALUE(file, "DEVX_LOG_PATH='", dir, "': cannot open ", path, " for writing (", std::strerror(errno),
                    ")");
  return file;
}

// Switches to the file DEVX_LOG_PATH names now. If it cannot be opened, the log stays where it
// was and the next reload tries again.
void reopen_file() {
  std::string dir = settings::get_text(settings::Id::DEVX_LOG_PATH);
  std::lock_guard<std::mutex> lock(g_write_mutex);
  if (dir == g_file_dir) return;
  FILE* opened = dir.empty() ? nullptr : open_log_file(dir);
  if (g_file) std::fclose(g_file);
  g_file = opened;
  g_file_dir = dir;
}

}  // namespace

void reload() {
  reopen_file();
  std::string spec = settings::get_text(settings::Id::DEVX_LOG_LEVEL);
  std::array<int, kModules> levels;
  levels.fill(static_cast<int>(Level::WARN));
  for (const std::string& item : text::split_list(spec)) {
    auto eq = item.find('=');
    if (eq == std::string::npos) {
      levels.fill(static_cast<int>(parse_level(item, spec)));
      continue;
    }
    std::string mod = text::upper(text::trim(item.substr(0, eq)));
    size_t m = 0;
    while (m < kModules && mod != kModuleNames[m]) ++m;
    TORCH_CHECK_VALUE(m < kModules, "DEVX_LOG_LEVEL='", spec, "': unknown module '", mod,
                      "'; modules are RUNTIME, ALLOC, OPS, FALLBACK, TRACE, PROFILE, PYTHON");
    levels[m] = static_cast<int>(parse_level(item.substr(eq + 1), spec));
  }
  for (size_t m = 0; m < kModules; ++m) g_levels[m].store(levels[m], std::memory_order_relaxed);
}

bool enabled(Module m, Level l) {
  return static_cast<int>(l) >= g_levels[static_cast<size_t>(m)].load(std::memory_order_relaxed);
}

void write(Module m, Level l, const std::string& message) {
  std::lock_guard<std::mutex> lock(g_write_mutex);
  FILE* out = g_file ? g_file : stderr;
  std::fprintf(out, "[devx %s %s] %s\n", kModuleNames[static_cast<size_t>(m)], kLevelNames[static_cast<size_t>(l)],
               message.c_str());
  if (g_file) std::fflush(g_file);
}

std::optional<Module> module_named(const std::string& name) {
  for (size_t m = 0; m < kModules; ++m) {
    if (name == kModuleNames[m]) return static_cast<Module>(m);
  }
  return std::nullopt;
}

namespace {
// Constructed after g_init (same file, later): the defaults are in place when it first reloads.
settings::Watch g_watch({settings::Id::DEVX_LOG_LEVEL, settings::Id::DEVX_LOG_PATH}, &reload);
}  // namespace

}  // namespace devx::log
