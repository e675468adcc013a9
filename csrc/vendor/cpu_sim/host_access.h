// Host-access detection for cpu_sim's memory (the table's host_access, vendor_api.h). The arena
// is host memory, so host code reading or writing a device pointer silently works here where a
// real device would fault or return garbage. Watched ranges are mprotect'ed to PROT_NONE while no
// device work runs; a SIGSEGV handler tells the caller's device work (which opens the range until
// the work ends) from host code (recorded, let through, and the caller notified).
#pragma once

#include "runtime/vendor_api.h"

namespace devx::cpu_sim {

const DevxHostAccessApi* host_access_api();

}  // namespace devx::cpu_sim
