#include "aten/compute_allocator.h"

#include "aten/compute_scope.h"

#include <ATen/Context.h>
#include <c10/core/Allocator.h>
#include <c10/util/StringUtil.h>

#include <atomic>
#include <cstdlib>
#include <mutex>

#include "runtime/allocator.h"
#include "runtime/device.h"
#include "runtime/log.h"
#include "runtime/vendor.h"

namespace devx {
namespace {

std::atomic<bool> g_routed{false};
// Set by an exit handler registered at the first allocation, after the devx allocator's statics
// exist, so it runs before they are destroyed: CUDA memory that torch's own statics hold is freed
// (if ever) during static destruction, when the process no longer needs the bytes back.
std::atomic<bool> g_exiting{false};
std::once_flag g_exit_handler;

// The block adopt_compute_allocation is taking over on this thread: the compute allocator's
// deleter, which runs while the storage's DataPtr is replaced, must not free it.
thread_local void* t_adopting = nullptr;

}  // namespace

void set_compute_allocations_routed() {
  g_routed.store(true);
}

bool compute_allocations_routed() {
  return g_routed.load(std::memory_order_relaxed);
}

void keep_compute_settings_supported() {
  if (!g_routed.load(std::memory_order_relaxed)) return;
  at::Context& context = at::globalContext();
  if (C10_LIKELY(!context.benchmarkCuDNN())) return;
  context.setBenchmarkCuDNN(false);
  TORCH_WARN("devx (", vendor().name, " vendor): torch.backends.cudnn.benchmark has been turned off. cuDNN's "
             "benchmark mode asks CUDA's caching allocator for its largest free block, and devx memory reaches "
             "ATen's CUDA kernels through torch's pluggable allocator, which cannot answer that.");
}

bool adopt_compute_allocation(c10::StorageImpl* s) {
  if (!g_routed.load(std::memory_order_relaxed)) return false;
  const c10::DataPtr& current = s->data_ptr();
  void* ptr = current.get();
  // Only bytes exactly as the storage's allocator handed them out (not a view into them, not a
  // DataPtr some kernel built over them) are the allocator's to give up.
  c10::Allocator* allocator = s->allocator();
  if (ptr == nullptr || allocator == nullptr || current.get_deleter() != allocator->raw_deleter() ||
      current.get_context() != ptr) {
    return false;
  }
  std::optional<c10::DeviceIndex> device = live_allocation_device(ptr);
  if (!device) return false;
  t_adopting = ptr;
  s->set_data_ptr_noswap(c10::DataPtr(ptr, ptr, devx_allocator()->raw_deleter(), devx_device(*device)));
  const bool released = t_adopting == nullptr;
  t_adopting = nullptr;
  TORCH_INTERNAL_ASSERT(released, "devx: the compute allocator kept ", ptr, " when its storage was adopted");
  // Growing or cloning the storage later allocates devx memory too.
  s->set_allocator(devx_allocator());
  return true;
}

}  // namespace devx

// `stream` is CUDA's current stream, which inside an op is the devx current stream the block is
// tagged with. Outside one (ProcessGroupNCCL's own buffers) blocks rely on torch's stream-safety
// without record_stream, which _compute_allocator.py sets up (TORCH_NCCL_AVOID_RECORD_STREAMS).
void* devx_compute_malloc(size_t size, int device, void* /*stream*/) {
  auto index = static_cast<c10::DeviceIndex>(device);
  c10::DataPtr block = devx::devx_allocator()->allocate_on(index, size, devx::compute_device_for(index));
  std::call_once(devx::g_exit_handler, [] { std::atexit([] { devx::g_exiting.store(true); }); });
  // The context is the pointer itself; the compute allocator owns the block until its free.
  return block.move_context().release();
}

void devx_compute_free(void* ptr, size_t /*size*/, int /*device*/, void* /*stream*/) {
  if (devx::g_exiting.load()) return;
  if (ptr == devx::t_adopting) {
    devx::t_adopting = nullptr;
    return;
  }
  if (!devx::free_if_devx_allocation(ptr) && devx::log::enabled(devx::log::Module::ALLOC, devx::log::Level::ERROR)) {
    devx::log::write(devx::log::Module::ALLOC, devx::log::Level::ERROR,
                     "the compute device's allocator freed " + c10::str(ptr) + ", which devx never handed it");
  }
}
