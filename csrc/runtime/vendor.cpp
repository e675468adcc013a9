#include "runtime/vendor.h"

#include <dlfcn.h>

#include <mutex>

#include "runtime/env.h"
#include "runtime/exception.h"
#include "runtime/log.h"

namespace devx {

const DevxVendorApi* g_vendor = nullptr;
bool g_async_host_streams = false;

namespace {

std::mutex g_load_mutex;

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
  const DevxVendorApi* api = nullptr;
  std::string error;  // why it could not be used
  DevxStatus status = DEVX_OK;
};

Candidate open_vendor(const std::string& dir, const std::string& name) {
  Candidate c;
  std::string path = dir + "/libdevx_vendor_" + name + ".so";
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
  if (!api || api->api_version != DEVX_VENDOR_API_VERSION) {
    c.error = path + " implements vendor API version " +
        std::to_string(api ? api->api_version : -1) + ", this build expects " +
        std::to_string(DEVX_VENDOR_API_VERSION);
    c.status = DEVX_ERROR;
    return c;
  }
  DevxStatus st = api->init();
  if (st != DEVX_OK) {
    c.error = std::string("vendor '") + name + "' failed to initialise (" + status_name(st) +
        "): " + api->last_error();
    c.status = st;
    return c;
  }
  if (api->kernels && api->kernels->op && api->kernel_abi_version != DEVX_KERNEL_ABI_VERSION) {
    c.error = path + " brings kernels of kernel ABI version " + std::to_string(api->kernel_abi_version) +
        ", this build expects " + std::to_string(DEVX_KERNEL_ABI_VERSION);
    c.status = DEVX_ERROR;
    return c;
  }
  c.api = api;
  return c;
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

void load_vendor(const std::string& library_dir) {
  std::lock_guard<std::mutex> lock(g_load_mutex);
  if (g_vendor) return;
  std::string requested = env::get_string("DEVX_VENDOR", "");
  if (!requested.empty() && requested != "cpu_sim" && requested != "cuda") {
    TORCH_CHECK_VALUE(false, "DEVX_VENDOR='", requested,
                      "' is not a known vendor; use cpu_sim or cuda (or leave it unset to pick cuda "
                      "when a CUDA device is usable, else cpu_sim)");
  }
  Candidate chosen;
  if (requested.empty()) {
    chosen = open_vendor(library_dir, "cuda");
    if (!chosen.api) {
      log::info(log::Module::RUNTIME, "cuda vendor not used (" + chosen.error + "); using cpu_sim");
      chosen = open_vendor(library_dir, "cpu_sim");
    }
  } else {
    chosen = open_vendor(library_dir, requested);
  }
  if (!chosen.api) {
    if (chosen.status == DEVX_ERROR_INVALID) TORCH_CHECK_VALUE(false, "devx: ", chosen.error);
    TORCH_CHECK(false, "devx: ", chosen.error);
  }
  g_vendor = chosen.api;
  g_async_host_streams = g_vendor->compute_device_type >= 0 && g_vendor->async_host_streams != nullptr &&
                         g_vendor->async_host_streams() != 0;
  log::info(log::Module::RUNTIME, std::string("using vendor ") + g_vendor->name);
}

bool vendor_loaded() {
  return g_vendor != nullptr;
}

const DevxVendorApi& vendor() {
  TORCH_CHECK(g_vendor, "devx: no vendor loaded; `import torch_devx` loads one");
  return *g_vendor;
}

}  // namespace devx
