// Which vendor library runs this process, loaded once at import.
#pragma once

#include <atomic>
#include <string>
#include <vector>

#include "runtime/vendor_api.h"

namespace devx {

// Loads the vendor from the libraries at `paths` (torch_devx/_vendors.py finds them): the one
// asked for (`requested`, which must work), or the usable one of highest auto_priority. Throws
// with a message naming the library and the problem; calling it again after success is a no-op.
void load_vendor(const std::vector<std::string>& paths, bool requested);

bool vendor_loaded();

// "DEVX_ERROR_OOM" for DEVX_ERROR_OOM, and so on.
const char* status_name(DevxStatus status);

// The loaded vendor's table. Throws if `load_vendor` has not succeeded: a devx tensor cannot
// exist before then, so this only fires for misuse from C++.
const DevxVendorApi& vendor();

// The table calls go through, for the common case where it has been checked already (hot paths).
// Atomic because runtime tracing swaps it (for its shims and back) while stream workers and
// autograd threads call through it; an acquire load is a plain load on x86 and ARM's ldar.
class VendorTable {
 public:
  const DevxVendorApi* get() const { return table_.load(std::memory_order_acquire); }
  const DevxVendorApi* operator->() const { return get(); }
  const DevxVendorApi& operator*() const { return *get(); }
  explicit operator bool() const { return get() != nullptr; }
  void set(const DevxVendorApi* table) { table_.store(table, std::memory_order_release); }

 private:
  std::atomic<const DevxVendorApi*> table_{nullptr};
};
extern VendorTable g_vendor;

// The loaded vendor's async_host_streams answer: kernels are issued as host functions on the
// current stream instead of running on the calling thread. Set once, at load.
extern bool g_async_host_streams;

}  // namespace devx
