#include "runtime/vendor.h"

#include <dlfcn.h>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <mutex>
#include <vector>

#include "runtime/exception.h"
#include "runtime/log.h"

namespace devx {

VendorTable g_vendor;
bool g_async_host_streams = false;

namespace {

std::mutex g_load_mutex;

// A table of an older version, copied into one of this version whose newer entries are NULL.
DevxVendorApi g_upgraded;

// How many bytes of the table a vendor of `version` fills: up to the first entry added after it.
static_assert(DEVX_VENDOR_API_VERSION == 5, "table_bytes() names where each older version's table ends");
size_t table_bytes(int version) {
  if (version == 4) return offsetof(DevxVendorApi, host_access);
  return sizeof(DevxVendorApi);
}

}  // namespace

const char* status_name(DevxStatus s) {
  switch (s) {
    case DEVX_OK: return "DEVX_OK";
    case DEVX_ERROR: return "DEVX_ERROR";
    case DEVX_ERROR_OOM: return "DEVX_ERROR_OOM";
    case DEVX_ERROR_INVALID: return "DEVX_ERROR_INVALID";
    case DEVX_ERROR_NOT_READY: return "DEVX_ERROR_NOT_READY";
    case DEVX_ERROR_NO_DEVICE: return "DEVX_ERROR_NO_DEVICE";
    case DEVX_DECLINED: return "DEVX_DECLINED";
  }
  return "unknown status";
}

namespace {

struct Candidate {
  std::string path;
  const DevxVendorApi* api = nullptr;
  std::string error;  // why it could not be used
  DevxStatus status = DEVX_OK;
};

// dlopen()s `path` and checks its table, without initialising it.
Candidate open_vendor(const std::string& path) {
  Candidate c;
  c.path = path;
  // RTLD_LOCAL: vendors export one symbol and must not leak theirs into torch's namespace.
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    const char* err = dlerror();
    c.error = "cannot load " + path + ": " + (err ? err : "unknown dlopen error");
    c.status = DEVX_ERROR_NO_DEVICE;
    return c;
  }
  auto get_api = reinterpret_cast<DevxVendorGetApiFn>(dlsym(handle, DEVX_VENDOR_ENTRY_SYMBOL));
  if (!get_api) {
    c.error = path + " does not export " DEVX_VENDOR_ENTRY_SYMBOL;
    c.status = DEVX_ERROR;
    return c;
  }
  const DevxVendorApi* api = get_api();
  if (!api || api->api_version < DEVX_VENDOR_API_OLDEST_VERSION || api->api_version > DEVX_VENDOR_API_VERSION) {
    c.error = path + " implements vendor API version " + std::to_string(api ? api->api_version : -1) +
        ", this build loads versions " + std::to_string(DEVX_VENDOR_API_OLDEST_VERSION) + " to " +
        std::to_string(DEVX_VENDOR_API_VERSION);
    c.status = DEVX_ERROR;
    return c;
  }
  std::string missing;
#define DEVX_CHECK_FILLED(field) \
  if (!api->field) missing += std::string(missing.empty() ? "" : ", ") + #field;
  DEVX_VENDOR_REQUIRED_FUNCTIONS(DEVX_CHECK_FILLED)
#undef DEVX_CHECK_FILLED
  if (!api->name) missing += std::string(missing.empty() ? "" : ", ") + "name";
  if (!missing.empty()) {
    c.error = path + "'s vendor table leaves NULL: " + missing;
    c.status = DEVX_ERROR;
    return c;
  }
  c.api = api;
  return c;
}

// Initialises an opened vendor; c.api is reset if it fails.
void init_vendor(Candidate& c) {
  const DevxVendorApi* api = c.api;
  DevxStatus st = api->init();
  if (st != DEVX_OK) {
    c.error = std::string("vendor '") + api->name + "' (" + c.path + ") failed to initialise (" + status_name(st) +
        "): " + api->last_error();
    c.status = st;
    c.api = nullptr;
    return;
  }
  if (api->kernels && api->kernels->op && api->kernel_abi_version != DEVX_KERNEL_ABI_VERSION) {
    c.error = std::string("vendor '") + api->name + "' (" + c.path + ") brings kernels of kernel ABI version " +
        std::to_string(api->kernel_abi_version) + ", this build expects " + std::to_string(DEVX_KERNEL_ABI_VERSION);
    c.status = DEVX_ERROR;
    c.api = nullptr;
  }
}

}  // namespace

[[noreturn]] void throw_vendor_error(DevxStatus status, const char* call, const char* file, int line) {
  std::string msg = std::string("devx: ") + (g_vendor ? g_vendor->name : "vendor") + " call " + call +
      " failed (" + status_name(status) + "): " + (g_vendor ? g_vendor->last_error() : "");
  if (status == DEVX_ERROR_OOM) {
    throw c10::OutOfMemoryError({__func__, file, static_cast<uint32_t>(line)}, msg);
  }
  throw c10::Error({__func__, file, static_cast<uint32_t>(line)}, msg);
}

void load_vendor(const std::vector<std::string>& paths, bool requested) {
  std::lock_guard<std::mutex> lock(g_load_mutex);
  if (g_vendor) return;
  TORCH_CHECK(!paths.empty(), "devx: no vendor library found (set DEVX_VENDOR to a vendor's name or path)");
  std::vector<Candidate> opened;
  std::string errors;
  for (const std::string& path : paths) {
    Candidate c = open_vendor(path);
    if (c.api) {
      opened.push_back(std::move(c));
    } else {
      errors += "\n  " + c.error;
      if (requested) TORCH_CHECK(false, "devx: ", c.error);
    }
  }
  std::stable_sort(opened.begin(), opened.end(),
                   [](const Candidate& a, const Candidate& b) { return a.api->auto_priority > b.api->auto_priority; });
  Candidate chosen;
  for (Candidate& c : opened) {
    init_vendor(c);
    if (c.api) {
      chosen = c;
      break;
    }
    if (requested) {
      if (c.status == DEVX_ERROR_INVALID) TORCH_CHECK_VALUE(false, "devx: ", c.error);
      TORCH_CHECK(false, "devx: ", c.error);
    }
    log::info(log::Module::RUNTIME, c.error + "; trying the next vendor");
    errors += "\n  " + c.error;
  }
  TORCH_CHECK(chosen.api, "devx: no vendor could be used:", errors);
  if (chosen.api->api_version < DEVX_VENDOR_API_VERSION) {
    // Copied after init(), which may still fill the table.
    std::memset(&g_upgraded, 0, sizeof g_upgraded);
    std::memcpy(&g_upgraded, chosen.api, table_bytes(chosen.api->api_version));
    chosen.api = &g_upgraded;
  }
  g_vendor.set(chosen.api);
  g_async_host_streams = g_vendor->compute_device_type >= 0 && g_vendor->async_host_streams != nullptr &&
                         g_vendor->async_host_streams() != 0;
  log::info(log::Module::RUNTIME, std::string("using vendor ") + g_vendor->name + " (" + chosen.path + ")");
}

bool vendor_loaded() {
  return static_cast<bool>(g_vendor);
}

const DevxVendorApi& vendor() {
  TORCH_CHECK(g_vendor, "devx: no vendor loaded; `import torch_devx` loads one");
  return *g_vendor;
}

}  // namespace devx
