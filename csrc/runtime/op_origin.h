// What op the current thread runs, for diagnostics that attribute work to it (the memory checker,
// the op dump): the outermost op (RecordFunction's name, "aten::linear"), or in the backward pass
// the autograd node and the user's line of the forward op that made it. Nodes are matched to
// forward ops by (thread, sequence number), as the profiler pairs them.
//
// Observed only while a client asks (a RecordFunction global callback): off, ops pay nothing.
#pragma once

#include <string>

#include "runtime/python_hooks.h"

namespace devx::op_origin {

enum class Client { kMemCheck = 0, kDump = 1 };
// Turns observation on for `client` (off once no client wants it).
void observe(Client client, bool on);

struct Current {
  const std::string* op;  // "" outside ops
  bool backward;          // an autograd node runs
  PythonSite forward;     // for backward: the user's line of the forward op that made the node
};
// Valid until the thread's next op starts or ends.
Current current();

}  // namespace devx::op_origin
