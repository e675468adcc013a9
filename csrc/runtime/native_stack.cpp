#include "runtime/native_stack.h"

#include <cxxabi.h>
#include <dlfcn.h>
#include <execinfo.h>

#include <cstdio>
#include <cstdlib>
#include <sstream>

namespace devx {

std::vector<void*> capture_native_stack(int skip, int max_frames) {
  std::vector<void*> pcs(static_cast<size_t>(max_frames + skip + 1));
  int n = backtrace(pcs.data(), static_cast<int>(pcs.size()));
  const int first = skip + 1;
  if (n <= first) return {};
  return std::vector<void*>(pcs.begin() + first, pcs.begin() + n);
}

std::string native_symbol(void* pc, std::string* library) {
  Dl_info info{};
  if (dladdr(pc, &info) == 0) return "";
  if (library && info.dli_fname) *library = info.dli_fname;
  if (!info.dli_sname) {
    char offset[32];
    std::snprintf(offset, sizeof(offset), "+0x%zx",
                  static_cast<size_t>(static_cast<char*>(pc) - static_cast<char*>(info.dli_fbase)));
    return offset;
  }
  int status = 0;
  char* demangled = abi::__cxa_demangle(info.dli_sname, nullptr, nullptr, &status);
  std::string name = status == 0 && demangled ? demangled : info.dli_sname;
  std::free(demangled);
  return name;
}

std::string format_native_stack(const std::vector<void*>& pcs) {
  std::ostringstream os;
  int i = 0;
  for (void* pc : pcs) {
    std::string library;
    std::string name = native_symbol(pc, &library);
    // The interpreter's own frames say nothing the Python stack does not say better.
    if (name.rfind("_PyEval", 0) == 0 || name.rfind("PyEval", 0) == 0) break;
    os << "    #" << i++ << " " << (name.empty() ? "??" : name) << " (" << library << ")\n";
  }
  return os.str();
}

}  // namespace devx
