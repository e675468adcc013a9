// Which vendor library runs this process, loaded once at import.
#pragma once

#include <string>

#include "runtime/vendor_api.h"

namespace devx {

// Picks the vendor from DEVX_VENDOR (cpu_sim | cuda | unset = cuda when built and usable, else
// cpu_sim), dlopen()s libdevx_vendor_<name>.so from `library_dir` and initialises it.
// Throws with a message naming the problem; calling it again after success is a no-op.
void load_vendor(const std::string& library_dir);

bool vendor_loaded();

// "DEVX_ERROR_OOM" for DEVX_ERROR_OOM, and so on.
const char* status_name(DevxStatus status);

// The loaded vendor's table. Throws if `load_vendor` has not succeeded: a devx tensor cannot
// exist before then, so this only fires for misuse from C++.
const DevxVendorApi& vendor();

// For the common case where the table has been checked already (hot paths).
extern const DevxVendorApi* g_vendor;

// The loaded vendor's async_host_streams answer: kernels are issued as host functions on the
// current stream instead of running on the calling thread. Set once, at load.
extern bool g_async_host_streams;

}  // namespace devx
