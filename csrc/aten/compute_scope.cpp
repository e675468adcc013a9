#include "aten/compute_scope.h"

#include "aten/compute_allocator.h"

#include <c10/core/CPUAllocator.h>
#include <c10/core/InferenceMode.h>
#include <c10/core/StorageImpl.h>
#include <c10/core/TensorImpl.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstring>
#include <mutex>
#include <typeinfo>
#include <vector>

#include "runtime/allocator.h"
#include "runtime/device.h"
#include "runtime/exception.h"
#include "runtime/fork.h"
#include "runtime/generator.h"
#include "runtime/memcpy.h"
#include "runtime/per_thread.h"
#include "runtime/sanitizer.h"
#include "runtime/stream.h"
#include "runtime/vendor.h"

namespace devx {

namespace {

int g_compute_type = -1;
// Whether the compute device has streams (every compute device but the CPU).
bool g_compute_streams = false;
c10::DeleterFnPtr g_original_cpu_raw_deleter = nullptr;

// Allocator::raw_allocate/raw_deallocate (used by some CPU kernels for workspaces) free through
// raw_deleter() whatever allocate() returned, so it must recognise both kinds of memory.
void routing_raw_free(void* ptr) {
  if (!free_if_devx_allocation(ptr)) g_original_cpu_raw_deleter(ptr);
}
// Device whose memory the compute device's allocator hands out on this thread, -1 for none.
DEVX_HOT_TLS thread_local int t_route_device = -1;

// Installed as the process's CPU allocator when the compute device is the CPU. Outside a compute
// scope it is the original allocator; inside one, CPU kernels allocating their outputs and
// temporaries get devx memory (reported as CPU memory, which is what those kernels expect), so
// their results need no copy. One thread-local read per CPU allocation is all it costs.
class RoutingCpuAllocator final : public c10::Allocator {
 public:
  explicit RoutingCpuAllocator(c10::Allocator* original) : original_(original) {}
  c10::DataPtr allocate(size_t n) override {
    if (t_route_device >= 0) {
      return devx_allocator()->allocate_on(static_cast<c10::DeviceIndex>(t_route_device), n,
                                           c10::Device(c10::kCPU));
    }
    return original_->allocate(n);
  }
  c10::DeleterFnPtr raw_deleter() const override {
    return g_original_cpu_raw_deleter ? &routing_raw_free : nullptr;
  }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    std::memcpy(dest, src, count);
  }

 private:
  c10::Allocator* original_;
};

// The allocator of alias storages. Kept apart from the compute device's own allocator (same
// behaviour on the CPU) so that sync_back can tell an alias storage the kernel resized from a
// storage the kernel made.
c10::Allocator* g_alias_allocator = nullptr;

// An alias storage holds a reference on the devx storage it aliases: the bytes cannot go away
// while a kernel (or anything it stashed) still sees them.
void release_alias(void* ctx) {
  c10::intrusive_ptr<c10::StorageImpl>::reclaim(static_cast<c10::StorageImpl*>(ctx));
}

c10::DispatchKeySet g_compute_keyset;

c10::DispatchKeySet compute_keyset() {
  return g_compute_keyset;
}

// The alias allocator on a compute device other than the CPU: a kernel that grows an alias (an
// out= argument of the wrong size) gets devx memory of the scope's device, which sync_back adopts.
class ComputeDeviceAliasAllocator final : public c10::Allocator {
 public:
  c10::DataPtr allocate(size_t n) override {
    auto device = static_cast<c10::DeviceIndex>(t_route_device >= 0 ? t_route_device : current_device());
    return devx_allocator()->allocate_on(device, n, compute_device_for(device));
  }
  c10::DeleterFnPtr raw_deleter() const override { return devx_allocator()->raw_deleter(); }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    copy_device_bytes(dest, src, count, current_device());
  }
};

c10::intrusive_ptr<c10::StorageImpl> make_alias_storage(c10::StorageImpl* s, c10::Device compute_device) {
  c10::raw::intrusive_ptr::incref(s);
  return c10::make_intrusive<c10::StorageImpl>(
      c10::StorageImpl::use_byte_size_t(), s->nbytes(),
      c10::DataPtr(const_cast<void*>(s->data()), s, &release_alias, compute_device), g_alias_allocator,
      /*resizable=*/true);
}

// The deleter of a cached alias storage's bytes, which it borrows: they belong to the devx
// storage (the context), which the op's own arguments keep alive while a scope uses the alias.
void borrow_alias(void*) {}

bool is_alias_data(const c10::DataPtr& dp) {
  return dp.get_deleter() == &release_alias || dp.get_deleter() == &borrow_alias;
}

// Alias storages kept between ops on this thread, one per slot, keyed by the devx StorageImpl
// they alias: an op on a tensor a recent op used finds its alias here instead of making one
// (making and freeing it was a tenth of a small op's cost). A cached alias borrows its bytes, so
// it keeps no devx memory alive; a scope that sees its alias escape (a kernel kept a reference)
// turns it into an owning alias and drops it from the cache. Keying on the StorageImpl address
// is safe even when a freed storage's address is reused: the alias is re-pointed whenever the
// bytes or size it records differ, and with equal ones it describes the new storage exactly.
constexpr size_t kCachedAliasSlots = 16;
}  // namespace

struct CachedAlias {
  c10::StorageImpl* devx = nullptr;
  c10::intrusive_ptr<c10::StorageImpl> alias;
  // An alias TensorImpl over `alias` that no scope uses, parked here when its scope closed: the
  // next op on the same devx storage takes it as it is, with no storage swapped in and out (two
  // storage swaps and their reference counting were a tenth of a small op's cost). Only ever over
  // `alias`: whatever drops or replaces `alias` drops it too.
  c10::intrusive_ptr<c10::TensorImpl> parked;
  // Open scopes on this thread using `alias`. While any does, the slot keeps it (neither replaced
  // nor dropped), so a scope needs no counted reference of its own: an atomic increment and
  // decrement per argument were a measurable share of a small op.
  uint32_t users = 0;
  // References on `alias` that are the cache's own: the slot's, and the parked TensorImpl's.
  size_t own_references() const { return parked ? 2 : 1; }
};

namespace {

using AliasSlots = std::array<CachedAlias, kCachedAliasSlots>;

CachedAlias& slot_for(AliasSlots& slots, const c10::StorageImpl* devx) {
  return slots[(reinterpret_cast<uintptr_t>(devx) >> 4) % kCachedAliasSlots];
}

// The alias storage of devx storage `s` for a scope: the slot's cached one (pinned for the scope:
// `*cached` is set, and the scope calls settle_alias_storage as it closes), else a new owning one.
C10_ALWAYS_INLINE c10::intrusive_ptr<c10::StorageImpl> alias_storage_for_scope(c10::StorageImpl* s, c10::Device compute_device,
                                                             CachedAlias** cached) {
  *cached = nullptr;
  AliasSlots* slots = per_thread<AliasSlots>();
  if (C10_UNLIKELY(!slots)) return make_alias_storage(s, compute_device);
  CachedAlias& slot = slot_for(*slots, s);
  c10::StorageImpl* a = slot.alias.get();
  const bool hit = a && slot.devx == s && a->data_ptr().get() == s->data() && a->nbytes() == s->nbytes() &&
                   a->device() == compute_device;
  if (!hit) {
    // A slot whose alias something still uses (an enclosing op's scope, a kernel that kept it) is
    // left alone.
    if (a && (slot.users > 0 || slot.alias.use_count() > slot.own_references())) {
      return make_alias_storage(s, compute_device);
    }
    c10::DataPtr borrowed(const_cast<void*>(s->data()), s, &borrow_alias, compute_device);
    if (a) {
      a->set_data_ptr_noswap(std::move(borrowed));
      a->set_nbytes(s->nbytes());
    } else {
      slot.alias = c10::make_intrusive<c10::StorageImpl>(c10::StorageImpl::use_byte_size_t(), s->nbytes(),
                                                         std::move(borrowed), g_alias_allocator, /*resizable=*/true);
    }
    slot.devx = s;
  }
  ++slot.users;
  *cached = &slot;
  return {};
}

// Called as a scope closes, for each cached alias storage it used (its alias tensors released or
// parked already). Once no scope uses it, an alias something else still holds (a kernel kept it)
// starts owning its bytes, as an uncached one does, and leaves the cache. Until then the devx
// storage stays alive through the open scopes' arguments.
void settle_alias_storage(CachedAlias& slot) {
  if (--slot.users > 0) return;
  c10::StorageImpl* alias = slot.alias.get();
  if (slot.alias.use_count() <= slot.own_references()) return;
  c10::raw::intrusive_ptr::incref(slot.devx);
  alias->set_data_ptr_noswap(
      c10::DataPtr(alias->data_ptr().get(), slot.devx, &release_alias, alias->data_ptr().device()));
  slot.parked.reset();
  slot.alias.reset();
  slot.devx = nullptr;
}

// The TensorImpl parked in the slot of cached alias storage `alias` (of devx storage `devx`), or
// null if none is.
c10::intrusive_ptr<c10::TensorImpl> take_parked(const c10::StorageImpl* devx, const c10::StorageImpl* alias) {
  AliasSlots* slots = per_thread<AliasSlots>();
  if (C10_UNLIKELY(!slots)) return {};
  CachedAlias& slot = slot_for(*slots, devx);
  if (!slot.parked || slot.alias.get() != alias) return {};
  return std::move(slot.parked);
}

// Parks a TensorImpl nothing else holds over a cached alias storage in its slot; false (nothing
// done) where it is over another storage or the slot has one parked already.
bool park(c10::intrusive_ptr<c10::TensorImpl>& impl) {
  const c10::StorageImpl* alias = impl->unsafe_storage().unsafeGetStorageImpl();
  const c10::DataPtr& dp = alias->data_ptr();
  if (dp.get_deleter() != &borrow_alias) return false;
  AliasSlots* slots = per_thread<AliasSlots>();
  if (C10_UNLIKELY(!slots)) return false;
  CachedAlias& slot = slot_for(*slots, static_cast<const c10::StorageImpl*>(dp.get_context()));
  if (slot.parked || slot.alias.get() != alias) return false;
  slot.parked = std::move(impl);
  return true;
}

// Element by element: these are a few dimensions, where a call to memcmp costs more.
C10_ALWAYS_INLINE bool same_geometry(const c10::TensorImpl& a, const c10::TensorImpl& b) {
  const c10::IntArrayRef as = a.sizes(), bs = b.sizes();
  if (as.size() != bs.size() || a.storage_offset() != b.storage_offset()) return false;
  const c10::IntArrayRef ast = a.strides(), bst = b.strides();
  for (size_t i = 0; i < as.size(); ++i) {
    if (as[i] != bs[i] || ast[i] != bst[i]) return false;
  }
  return true;
}

// Alias TensorImpls recycled between ops on this thread: allocating, constructing and destroying
// one per argument per op was a tenth of a small op's cost. Only a plain TensorImpl nothing else
// holds comes back: parked in the slot of its cached alias storage (see CachedAlias), which
// borrows its bytes, or else here, holding an empty storage (so no devx memory stays alive).
constexpr size_t kRecycledAliases = 8;
using RecycledAliases = std::vector<c10::intrusive_ptr<c10::TensorImpl>>;

C10_ALWAYS_INLINE c10::intrusive_ptr<c10::TensorImpl> make_alias(const at::Tensor& t, const c10::StorageImpl* devx,
                                               c10::StorageImpl* storage, c10::DispatchKeySet keyset) {
  c10::intrusive_ptr<c10::TensorImpl> impl = take_parked(devx, storage);
  if (!impl) {
    RecycledAliases* recycled = per_thread<RecycledAliases>();
    if (recycled && !recycled->empty()) {
      impl = std::move(recycled->back());
      recycled->pop_back();
    }
  }
  if (impl) {
    // A parked TensorImpl is over `storage` already, and usually of the dtype wanted.
    if (impl->unsafe_storage().unsafeGetStorageImpl() != storage || impl->dtype() != t.dtype()) {
      impl->set_storage_and_dtype(c10::Storage(c10::intrusive_ptr<c10::StorageImpl>::reclaim_copy(storage)), t.dtype());
    }
    // Ops in a loop see the same shapes again: the recycled geometry (and the contiguity worked
    // out from it) is still right.
    if (!same_geometry(*impl, *t.unsafeGetTensorImpl())) {
      impl->set_sizes_and_strides(t.sizes(), t.strides(), t.storage_offset());
    }
  } else {
    // Not an inference tensor even when made in inference mode: it is reused after it, where the
    // whole-sequence RNNs detach aliases and share the arguments' version counters with them.
    c10::InferenceMode not_inference(false);
    impl = c10::make_intrusive<c10::TensorImpl>(c10::Storage(c10::intrusive_ptr<c10::StorageImpl>::reclaim_copy(storage)),
                                                keyset, t.dtype());
    impl->set_sizes_and_strides(t.sizes(), t.strides(), t.storage_offset());
  }
  impl->_set_conj(t.is_conj());
  impl->_set_neg(t.is_neg());
  return impl;
}

void recycle_alias(c10::intrusive_ptr<c10::TensorImpl>&& impl) {
  if (impl.use_count() != 1 || impl.weak_use_count() != 1 || typeid(*impl) != typeid(c10::TensorImpl) ||
      !impl->allow_tensor_metadata_change() || park(impl)) {
    return;
  }
  RecycledAliases* recycled = per_thread<RecycledAliases>();
  if (!recycled || recycled->size() >= kRecycledAliases) return;
  static const c10::Storage no_bytes(c10::Storage::use_byte_size_t(), 0, c10::DataPtr(nullptr, c10::kCPU), nullptr,
                                     /*resizable=*/false);
  impl->set_storage_keep_dtype(no_bytes);
  recycled->push_back(std::move(impl));
}

// Devx memory the routing allocator handed to a kernel (reported as the compute device's) reports
// devx device `device`, the device of the scope that ran the kernel.
void report_as_devx(c10::StorageImpl* s, c10::DeviceIndex device) {
  if (s->data_ptr().device().type() != kDevx) s->_mutable_data_ptr_no_checks().unsafe_set_device(devx_device(device));
}

// The devx storage behind compute-device storage `s`, or an empty Storage if `s` is foreign
// (memory the devx allocator never handed out). Fresh devx memory the routing allocator handed
// to a kernel was allocated on `device`, the device of the scope that ran it.
c10::Storage devx_storage_for(c10::StorageImpl* s, c10::DeviceIndex device) {
  const c10::DataPtr& dp = s->data_ptr();
  if (is_alias_data(dp)) {
    return c10::Storage(c10::intrusive_ptr<c10::StorageImpl>::reclaim_copy(
        static_cast<c10::StorageImpl*>(dp.get_context())));
  }
  if (is_devx_allocation(dp)) {
    report_as_devx(s, device);
    return c10::Storage(c10::intrusive_ptr<c10::StorageImpl>::reclaim_copy(s));
  }
  if (adopt_compute_allocation(s)) {
    return c10::Storage(c10::intrusive_ptr<c10::StorageImpl>::reclaim_copy(s));
  }
  return {};
}

c10::Storage copy_foreign(c10::StorageImpl* s, c10::DeviceIndex device) {
  size_t n = s->nbytes();
  sanitizer::DeviceAccess access;
  c10::DataPtr fresh = devx_allocator()->allocate_on(device, n, devx_device(device));
  if (g_compute_type != static_cast<int>(c10::kCPU)) {
    // Every allocation of a routed compute device is devx memory, adopted rather than copied.
    if (compute_allocations_routed()) {
      TORCH_WARN_ONCE("devx: a kernel's result in memory devx did not hand out is copied into devx memory "
                      "(slower): the results of this torch's CUDA allocator could not be adopted");
    }
    copy_device_bytes(fresh.get(), s->data(), n, device);
  } else if (n > 0) {
    DEVX_VENDOR_CHECK(g_vendor->memcpy_sync(fresh.get(), s->data(), n, DEVX_MEMCPY_H2D));
  }
  return c10::Storage(c10::Storage::use_byte_size_t(), n, std::move(fresh), devx_allocator(), true);
}

// The devx storage a kernel's result lives in: the one it aliases or was allocated as, else a
// devx copy of foreign memory.
c10::Storage devx_storage_or_copy(c10::StorageImpl* s, c10::DeviceIndex device) {
  c10::Storage storage = devx_storage_for(s, device);
  return storage ? storage : copy_foreign(s, device);
}

// The compute device's stream that is the devx current stream of `device`. A vendor whose compute
// device has streams hands out that device's native stream handles, which c10 takes as external
// stream ids (CUDA: the cudaStream_t itself; NULL, the default stream, is id 0 there too).
c10::Stream compute_stream(c10::DeviceIndex device, c10::Device compute_device) {
  DevxStreamHandle handle = getCurrentDevxStream(device).handle();
  return c10::Stream(c10::Stream::UNSAFE, compute_device,
                     static_cast<c10::StreamId>(reinterpret_cast<intptr_t>(handle)));
}

[[noreturn]] void mixed_devices(const at::Tensor& t, c10::DeviceIndex device) {
  TORCH_CHECK(false, "Expected all tensors to be on the same device, but found at least two devices, ",
              devx_device(device), " and ", t.device(), "! (devx ops take tensors of one devx device; "
              "only 0-dim CPU tensors may be mixed in, as on CUDA)");
}

}  // namespace

namespace {

// Scopes opened, counted per thread: an atomic read-modify-write per op (a locked instruction)
// was a measurable share of a small op. Each thread's counter is written by that thread alone
// (a plain store) and read by any; a thread's count moves to g_exited_calls as it ends. Never
// destroyed: threads may end after static destruction.
struct ComputeCallCounter {
  std::atomic<uint64_t> calls{0};
  ComputeCallCounter();
  ~ComputeCallCounter();
};
std::mutex& counters_mutex() {
  static auto* m = new std::mutex;
  return *m;
}
std::vector<const ComputeCallCounter*>& live_counters() {
  static auto* v = new std::vector<const ComputeCallCounter*>;
  return *v;
}
std::atomic<uint64_t> g_exited_calls{0};

ComputeCallCounter::ComputeCallCounter() {
  std::lock_guard<std::mutex> lock(counters_mutex());
  live_counters().push_back(this);
}

ComputeCallCounter::~ComputeCallCounter() {
  std::lock_guard<std::mutex> lock(counters_mutex());
  auto& live = live_counters();
  live.erase(std::find(live.begin(), live.end(), this));
  g_exited_calls.fetch_add(calls.load(std::memory_order_relaxed), std::memory_order_relaxed);
}

void count_compute_call() {
  if (ComputeCallCounter* counter = per_thread<ComputeCallCounter>()) {
    counter->calls.store(counter->calls.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  } else {
    g_exited_calls.fetch_add(1, std::memory_order_relaxed);  // a scope in a thread-exit destructor
  }
}

}  // namespace

uint64_t compute_calls() {
  std::lock_guard<std::mutex> lock(counters_mutex());
  uint64_t total = g_exited_calls.load(std::memory_order_relaxed);
  for (const ComputeCallCounter* counter : live_counters()) total += counter->calls.load(std::memory_order_relaxed);
  return total;
}

ComputeScope::ComputeScope(ArgumentsOutliveScope) : ComputeScope() {
  holds_arguments_ = false;
}

C10_ALWAYS_INLINE at::Tensor& ComputeScope::AliasTensors::push_back(at::Tensor t) {
  if (size_ < kInline) {
    inline_[size_] = std::move(t);
  } else {
    overflow_.push_back(std::make_unique<at::Tensor>(std::move(t)));
  }
  return (*this)[size_++];
}

ComputeScope::ComputeScope()
    : device_(current_device()),
      compute_device_(compute_device_for(device_)),
      keyset_(compute_keyset()),
      previous_route_(t_route_device) {
  TORCH_CHECK(g_compute_type >= 0, "devx: vendor '", vendor().name,
              "' runs no ATen kernels on its memory; this op needs a kernel of its own");
  // Where the compute device is the CPU, a kernel writes devx memory without any runtime call
  // that a forked child would refuse.
  check_not_forked();
  count_compute_call();
  if (g_compute_streams) {
    keep_compute_settings_supported();
    previous_compute_stream_ =
        c10::impl::getDeviceGuardImpl(compute_device_.type())->exchangeStream(compute_stream(device_, compute_device_));
  }
  // Last: nothing after it may throw, or the destructor would not restore it.
  if (g_alias_allocator) t_route_device = device_;
}

ComputeScope::~ComputeScope() {
  if (previous_compute_stream_) {
    c10::impl::getDeviceGuardImpl(compute_device_.type())->exchangeStream(*previous_compute_stream_);
  }
  t_route_device = previous_route_;
  // Those not recycled go now, so that only references from outside count as an escape.
  for (size_t i = 0; i < alias_tensors_.size(); ++i) {
    recycle_alias(c10::intrusive_ptr<c10::TensorImpl>::reclaim(alias_tensors_[i].unsafeReleaseTensorImpl()));
  }
  for (const Aliased& a : aliases_) {
    if (a.cached) settle_alias_storage(*a.cached);
    if (holds_arguments_) c10::raw::intrusive_ptr::decref(a.devx);
  }
}

at::Tensor& ComputeScope::alias_of(const at::Tensor& t) const {
  if (C10_UNLIKELY(t.device().index() != device_)) mixed_devices(t, device_);
  const c10::TensorImpl* impl = t.unsafeGetTensorImpl();
  for (size_t i = 0; i < aliased_tensors_.size(); ++i) {
    if (aliased_tensors_[i] == impl) return alias_tensors_[i];
  }
  c10::StorageImpl* devx = t.storage().unsafeGetStorageImpl();
  at::Tensor& alias = alias_tensors_.push_back(at::Tensor(make_alias(t, devx, alias_storage(devx), keyset_)));
  aliased_tensors_.push_back(impl);
  return alias;
}

const at::Tensor& ComputeScope::in(const at::Tensor& t) const {
  if (!t.defined()) return t;
  c10::DeviceType type = t.device().type();
  if (C10_LIKELY(type == kDevx)) return alias_of(t);
  if (type == c10::kCPU && t.dim() == 0) return t;
  mixed_devices(t, device_);
}

at::Tensor& ComputeScope::in_written(const at::Tensor& t) const {
  if (C10_UNLIKELY(!t.defined())) {
    aliased_tensors_.push_back(t.unsafeGetTensorImpl());
    return alias_tensors_.push_back(at::Tensor());
  }
  if (C10_UNLIKELY(t.device().type() != kDevx)) mixed_devices(t, device_);
  return alias_of(t);
}

std::optional<at::Tensor> ComputeScope::in_written(const std::optional<at::Tensor>& t) const {
  if (!t.has_value()) return std::nullopt;
  return in_written(*t);
}

std::vector<at::Tensor> ComputeScope::in_written(at::TensorList ts) const {
  std::vector<at::Tensor> out;
  out.reserve(ts.size());
  for (const auto& t : ts) out.push_back(in_written(t));
  return out;
}

C10_ALWAYS_INLINE c10::StorageImpl* ComputeScope::alias_storage(c10::StorageImpl* devx_storage) const {
  for (const Aliased& a : aliases_) {
    if (a.devx == devx_storage) return a.cached ? a.cached->alias.get() : a.owned.get();
  }
  if (holds_arguments_) c10::raw::intrusive_ptr::incref(devx_storage);
  CachedAlias* cached = nullptr;
  c10::intrusive_ptr<c10::StorageImpl> owned = alias_storage_for_scope(devx_storage, compute_device_, &cached);
  c10::StorageImpl* alias = cached ? cached->alias.get() : owned.get();
  aliases_.push_back({devx_storage, std::move(owned), cached});
  return alias;
}

std::optional<at::Tensor> ComputeScope::in(const std::optional<at::Tensor>& t) const {
  if (!t.has_value()) return std::nullopt;
  return in(*t);
}

std::vector<at::Tensor> ComputeScope::in(at::TensorList ts) const {
  std::vector<at::Tensor> out;
  out.reserve(ts.size());
  for (const auto& t : ts) out.push_back(in(t));
  return out;
}

std::vector<at::Tensor> ComputeScope::in(const at::ITensorListRef& ts) const {
  std::vector<at::Tensor> out;
  out.reserve(ts.size());
  for (const auto& t : ts) out.push_back(in(t));
  return out;
}

c10::List<std::optional<at::Tensor>> ComputeScope::in(const c10::List<std::optional<at::Tensor>>& ts) const {
  // Only indexing ops take optional-tensor lists, and their indices may live on the CPU, as with
  // CUDA tensors: the compute device's kernels accept them there.
  c10::List<std::optional<at::Tensor>> out;
  out.reserve(ts.size());
  for (const std::optional<at::Tensor>& t : ts) {
    bool on_cpu = t.has_value() && t->defined() && t->device().type() == c10::kCPU;
    out.push_back(on_cpu ? t : in(t));
  }
  return out;
}

std::optional<at::Generator> ComputeScope::generator(const std::optional<at::Generator>& gen) const {
  return compute_generator_for(gen, device_);
}

std::optional<c10::Device> ComputeScope::device(std::optional<c10::Device> d) const {
  if (d && d->type() == kDevx) return compute_device_;
  return d;
}

c10::Device ComputeScope::device(c10::Device d) const {
  return d.type() == kDevx ? compute_device_ : d;
}

at::Tensor ComputeScope::out(const at::Tensor& r) const {
  return alias_to_devx(r, device_);
}

at::Tensor ComputeScope::out(at::Tensor&& r) const {
  return alias_to_devx(std::move(r), device_);
}

std::vector<at::Tensor> ComputeScope::out(const std::vector<at::Tensor>& r) const {
  std::vector<at::Tensor> out;
  out.reserve(r.size());
  for (const auto& t : r) out.push_back(alias_to_devx(t, device_));
  return out;
}

std::vector<at::Tensor> ComputeScope::out(std::vector<at::Tensor>&& r) const {
  for (auto& t : r) t = alias_to_devx(std::move(t), device_);
  return std::move(r);
}

void ComputeScope::sync_back(const at::Tensor& devx_tensor, const at::Tensor& alias) const {
  if (!devx_tensor.defined() || devx_tensor.device().type() != kDevx) return;
  c10::TensorImpl* d = devx_tensor.unsafeGetTensorImpl();
  const c10::TensorImpl* a = alias.unsafeGetTensorImpl();
  c10::StorageImpl* as = a->storage().unsafeGetStorageImpl();
  c10::StorageImpl* ds = d->storage().unsafeGetStorageImpl();
  const bool aliased = is_alias_data(as->data_ptr());
  if (aliased && as->data_ptr().get_context() == ds) {
    // The kernel wrote through the alias of the tensor's own storage: the bytes are in place.
  } else if (as->allocator() == g_alias_allocator && !aliased) {
    // The kernel resized the alias (an out= argument of the wrong size): adopt the new bytes in
    // the devx storage itself, so every devx view of it sees them, as resize_ does on the CPU.
    c10::DataPtr moved = as->set_data_ptr(c10::DataPtr(nullptr, compute_device_));
    if (is_devx_allocation(moved)) {
      moved.unsafe_set_device(devx_device(device_));
      size_t n = as->nbytes();
      ds->set_data_ptr_noswap(std::move(moved));
      ds->set_nbytes(n);
    } else {
      d->set_storage_keep_dtype(copy_foreign(as, device_));
    }
  } else {
    c10::Storage target = devx_storage_or_copy(as, device_);
    if (target.unsafeGetStorageImpl() != ds) d->set_storage_keep_dtype(std::move(target));
  }
  if (!same_geometry(*d, *a)) d->set_sizes_and_strides(a->sizes(), a->strides(), a->storage_offset());
}

void ComputeScope::sync_back(at::TensorList devx_tensors, const std::vector<at::Tensor>& aliases) const {
  for (size_t i = 0; i < devx_tensors.size(); ++i) sync_back(devx_tensors[i], aliases[i]);
}

at::Tensor alias_to_devx(const at::Tensor& r, c10::DeviceIndex device) {
  if (!r.defined()) return r;
  auto impl = c10::make_intrusive<c10::TensorImpl>(
      devx_storage_or_copy(r.storage().unsafeGetStorageImpl(), device), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1), r.dtype());
  impl->set_sizes_and_strides(r.sizes(), r.strides(), r.storage_offset());
  if (C10_UNLIKELY(r.is_conj())) impl->_set_conj(true);
  if (C10_UNLIKELY(r.is_neg())) impl->_set_neg(true);
  return at::Tensor(std::move(impl));
}

at::Tensor alias_to_devx(at::Tensor&& r, c10::DeviceIndex device) {
  if (!r.defined()) return std::move(r);
  c10::TensorImpl* impl = r.unsafeGetTensorImpl();
  // Only a plain dense TensorImpl no one else can see may change device under its holder; a
  // subclass (sparse, opaque, wrapper) or a shared one gets a new devx TensorImpl instead.
  const bool reusable = r.use_count() == 1 && r.weak_use_count() == 1 && typeid(*impl) == typeid(c10::TensorImpl) &&
                        impl->layout() == c10::kStrided && impl->allow_tensor_metadata_change();
  if (!reusable) return alias_to_devx(static_cast<const at::Tensor&>(r), device);
  c10::StorageImpl* storage = impl->unsafe_storage().unsafeGetStorageImpl();
  if (is_devx_allocation(storage->data_ptr())) {
    // Fresh devx memory from the routing allocator (the usual result): the storage stays, only
    // the device its bytes report changes. It is moved out and back in (set_storage_keep_dtype
    // is what updates the TensorImpl's device): a copy of it cost two atomic reference counts.
    report_as_devx(storage, device);
    impl->set_storage_keep_dtype(std::move(const_cast<c10::Storage&>(impl->unsafe_storage())));
  } else {
    impl->set_storage_keep_dtype(devx_storage_or_copy(storage, device));
  }
  impl->_change_backend_component_keys(devx_device(device));
  return std::move(r);
}

void explain_compute_error(c10::Error& error, const char* op) {
  const auto compute = static_cast<c10::DeviceType>(vendor().compute_device_type);
  error.add_context(std::string("raised by the ") + c10::DeviceTypeName(compute, /*lower_case=*/true) +
                    " kernel that devx's " + op + " runs on " + vendor().name);
}

void install_compute_routing(int compute_device_type) {
  g_compute_type = compute_device_type;
  if (compute_device_type >= 0) {
    g_compute_keyset = c10::DispatchKeySet(c10::computeDispatchKey(
        std::nullopt, std::nullopt, static_cast<c10::DeviceType>(compute_device_type)));
    // Without the compute device's guard (a torch built without it) its kernels cannot run
    // either; the op fails there with torch's own error, not here.
    g_compute_streams = compute_device_type != static_cast<int>(c10::kCPU) &&
                        c10::impl::hasDeviceGuardImpl(static_cast<c10::DeviceType>(compute_device_type));
  }
  if (compute_device_type == static_cast<int>(c10::kCPU)) {
    g_original_cpu_raw_deleter = c10::GetCPUAllocator()->raw_deleter();
    static RoutingCpuAllocator routing(c10::GetCPUAllocator());
    static RoutingCpuAllocator alias_allocator(c10::GetCPUAllocator());
    g_alias_allocator = &alias_allocator;
    c10::SetCPUAllocator(&routing, /*priority=*/UINT8_MAX);
  } else if (compute_device_type >= 0) {
    static ComputeDeviceAliasAllocator alias_allocator;
    g_alias_allocator = &alias_allocator;
  }
}

int compute_device_type() {
  return g_compute_type;
}

c10::Device compute_device_for(c10::DeviceIndex device) {
  auto type = static_cast<c10::DeviceType>(g_compute_type);
  return type == c10::kCPU ? c10::Device(c10::kCPU) : c10::Device(type, device);
}

}  // namespace devx
