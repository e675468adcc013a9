// Issuing ops on streams, for a vendor whose kernels are host functions on asynchronous streams
// (vendor_api.h, async_host_streams: cpu_sim with DEVX_SIM_ASYNC=1).
//
// An op is issued, not run: its results' shapes come from its meta kernel on the calling thread
// (asked once per signature of arguments and remembered per thread: many meta kernels are Python),
// fresh results are allocated there (in the caller's stream's pool), and the kernel itself,
// followed by a copy of its results into those, is queued on the current stream with
// launch_host_work. The op returns at once; host reads
// (copies to the CPU, .item()) wait for the stream as the copy is ordered after the kernel.
//   * The queued work sees *snapshots* of its tensor arguments: tensors of their own over the
//     bytes the arguments had when the op was issued, holding the argument's storage. Metadata
//     changes the host makes later (t_(), resize_) do not reach work already issued, and the
//     bytes stay allocated until the work has run.
//   * Ops that cannot be issued run on the calling thread after waiting for the stream: those
//     whose results' shapes depend on data (nonzero; a failing meta kernel), that return
//     non-tensors, that resize a written argument, those whose meta kernel disagrees with the
//     compute kernel for these arguments, and those the vendor lacks (the CPU fallback
//     synchronises). Random ops are issued: draws stay in host order because every host access
//     to a devx generator's state waits for the draws issued (generator.h).
//     Views run at once without waiting: they touch no data. The vendor's own kernels are not
//     issued: they queue themselves on the current stream.
// Neither the issued work nor an op run inline goes through the diagnostics again.
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/core/boxing/BoxedKernel.h>
#include <ATen/core/dispatch/Dispatcher.h>

#include <functional>
#include <vector>

#include "runtime/vendor.h"

namespace devx::async {

// > 0 while this thread runs kernels itself: a stream's worker running issued work, or the host
// running an op that could not be issued.
extern thread_local int t_inline_depth;

// Whether ops called on this thread now are issued (only meaningful when g_async_host_streams).
inline bool issuing() {
  return t_inline_depth == 0;
}

// The boxed kernel the generated wrappers call while issuing: issues the op or runs it inline.
const c10::BoxedKernel& issue_kernel();
// The same, for boxed callers (the long-tail kernel).
void issue(const c10::OperatorHandle& op, torch::jit::Stack* stack);

// Queues `work` on the current stream of the current device, to run with `tensors` replaced by
// snapshots (see above). For hand-written kernels (device-side copies).
void launch(const std::vector<at::Tensor>& tensors, std::function<void(const std::vector<at::Tensor>&)> work);

}  // namespace devx::async
