// A vendor table for the unit tests: device memory from the heap, counted, with a capacity, and
// events that are always complete. Installed as the process's vendor before any test runs, as
// load_vendor() installs a library's table.
#pragma once

#include <cstddef>

#include "runtime/vendor_api.h"

namespace devx::test {

struct VendorCounts {
  int mallocs;
  int frees;
  size_t live_bytes;
};

VendorCounts vendor_counts();
// The bytes the fake device holds; a malloc past them fails with DEVX_ERROR_OOM.
void set_vendor_capacity(size_t bytes);
const DevxVendorApi* fake_vendor();

}  // namespace devx::test
