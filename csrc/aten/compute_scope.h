// Running ATen's kernels of the vendor's compute device on devx memory.
//
// A vendor whose memory the compute device's kernels can address (cpu_sim: host memory, so the
// CPU kernels; cuda: device memory, so the CUDA kernels) needs no kernels of its own: a devx
// argument is re-expressed as an *alias* — a compute-device tensor over the same bytes — the
// compute device's kernel runs, and what it returns is re-expressed as devx tensors.
//   * Inputs cost one small alias object each, no copy.
//   * Outputs the kernel allocates land in devx memory: while a scope is open on a thread, the
//     compute device's allocator hands out devx memory (see routing in compute_scope.cpp), so a
//     fresh output is wrapped, not copied.
//   * Outputs that view an input (view ops, `out=` returns) map back onto the devx storage.
//   * Mutated arguments whose alias was resized or re-pointed by the kernel (out= resizing,
//     set_) are synchronised back by sync_back.
// Mixing devices is checked here, as CUDA's kernels do: devx tensors on other devx devices and
// non-scalar CPU tensors are errors naming both devices.
#pragma once

#include <ATen/core/ATen_fwd.h>
#include <ATen/core/Generator.h>
#include <ATen/core/List.h>
#include <ATen/core/Tensor.h>
#include <c10/core/DispatchKeySet.h>
#include <c10/core/StorageImpl.h>
#include <c10/core/TensorImpl.h>
#include <c10/util/SmallVector.h>

#include <array>
#include <memory>
#include <vector>

#include "profiler/device_activity.h"
#include "runtime/sanitizer.h"

namespace devx {

// What a caller whose arguments outlive the scope passes (the generated compute kernels, whose
// arguments are the op's own parameters): the scope then takes no reference on their storages.
struct ArgumentsOutliveScope {};

// A thread's cached alias of one devx storage (compute_scope.cpp).
struct CachedAlias;

class ComputeScope {
 public:
  ComputeScope();
  explicit ComputeScope(ArgumentsOutliveScope);
  ~ComputeScope();
  ComputeScope(const ComputeScope&) = delete;
  ComputeScope& operator=(const ComputeScope&) = delete;

  c10::DispatchKeySet keyset() const { return keyset_; }

  // The alias of a devx tensor (or `t` itself: undefined, or a CPU scalar), valid while the scope
  // and `t` live.
  const at::Tensor& in(const at::Tensor& t) const;
  std::optional<at::Tensor> in(const std::optional<at::Tensor>& t) const;
  std::vector<at::Tensor> in(at::TensorList ts) const;
  std::vector<at::Tensor> in(const at::ITensorListRef& ts) const;
  c10::List<std::optional<at::Tensor>> in(const c10::List<std::optional<at::Tensor>>& ts) const;
  // An argument the op writes (out=, in-place self): a devx tensor of the scope's device. A CPU
  // tensor is an error even when 0-dim, as on CUDA: only inputs may be CPU scalars. The alias is
  // the scope's, mutable as a kernel's `Tensor&` parameter (undefined if `t` is).
  at::Tensor& in_written(const at::Tensor& t) const;
  std::optional<at::Tensor> in_written(const std::optional<at::Tensor>& t) const;
  std::vector<at::Tensor> in_written(at::TensorList ts) const;

  std::optional<at::Generator> generator(const std::optional<at::Generator>& gen) const;
  std::optional<c10::Device> device(std::optional<c10::Device> d) const;
  c10::Device device(c10::Device d) const;

  at::Tensor out(const at::Tensor& r) const;
  // A result nothing else holds (what a kernel returns fresh) becomes the devx tensor itself: its
  // TensorImpl is re-keyed for devx instead of copied into a new one.
  at::Tensor out(at::Tensor&& r) const;
  std::vector<at::Tensor> out(const std::vector<at::Tensor>& r) const;
  std::vector<at::Tensor> out(std::vector<at::Tensor>&& r) const;

  void sync_back(const at::Tensor& devx_tensor, const at::Tensor& alias) const;
  void sync_back(at::TensorList devx_tensors, const std::vector<at::Tensor>& aliases) const;

 private:
  // The compute device's kernels call ATen ops of their own (batch_norm's backward multiplies,
  // convolution picks mkldnn): while profiled, those must not appear as children of the devx op.
  profiler::HiddenOps hidden_ops_;
  // Arguments that share a devx storage share one alias storage, so the compute device's
  // kernels see the sharing (overlap checks, in-place ops reading their own output). The scope
  // holds each devx storage it aliased (unless told its arguments outlive it): a cached alias
  // borrows the bytes, and a caller may drop its own reference once it has the alias (the boxed
  // path replaces arguments by aliases).
  struct Aliased {
    c10::StorageImpl* devx;
    // The alias is `owned` or the slot's `cached`'s. An alias storage of its own (the thread's
    // cached one was busy), else null.
    c10::intrusive_ptr<c10::StorageImpl> owned;
    // The thread's cache slot whose alias this is, pinned while the scope is open.
    CachedAlias* cached;
  };
  c10::StorageImpl* alias_storage(c10::StorageImpl* devx_storage) const;
  // The alias of devx tensor `t` of the scope's device.
  at::Tensor& alias_of(const at::Tensor& t) const;
  mutable c10::SmallVector<Aliased, 4> aliases_;
  bool holds_arguments_ = true;
  // The alias tensors this scope made; those still unshared when it closes are recycled. A devx
  // tensor passed twice (`torch.mul(x, y, out=x)`, `torch.cat((x, y), out=x)`) gets its one alias
  // twice: the compute device's kernels compare TensorImpls to tell an output that is also an
  // input (which they must not resize) and full overlaps.
  // At addresses that stay put as more are added: in() hands out references to them.
  class AliasTensors {
   public:
    size_t size() const { return size_; }
    at::Tensor& operator[](size_t i) { return i < kInline ? inline_[i] : *overflow_[i - kInline]; }
    at::Tensor& push_back(at::Tensor t);

   private:
    static constexpr size_t kInline = 4;
    std::array<at::Tensor, kInline> inline_;
    std::vector<std::unique_ptr<at::Tensor>> overflow_;
    size_t size_ = 0;
  };
  mutable AliasTensors alias_tensors_;
  mutable c10::SmallVector<const c10::TensorImpl*, 4> aliased_tensors_;
  // DEVX_SIM_SANITIZE: the kernel's reads and writes through the aliases are device work, not
  // host code touching devx memory (see sanitizer.h).
  sanitizer::DeviceAccess device_work_;
  c10::DeviceIndex device_;
  c10::Device compute_device_;
  c10::DispatchKeySet keyset_;
  int previous_route_;
  // A compute device with streams of its own (CUDA) issues the op's kernels on its current stream,
  // which is the devx current stream for the op's duration, so devx streams and events order them.
  std::optional<c10::Stream> previous_compute_stream_;
};

// The devx tensor over the same bytes as compute-device tensor `r` (see ComputeScope::out),
// usable outside a scope by code that aliases by hand (copies, the fallback).
at::Tensor alias_to_devx(const at::Tensor& r, c10::DeviceIndex device);
at::Tensor alias_to_devx(at::Tensor&& r, c10::DeviceIndex device);

// How many ComputeScopes (calls of ATen's kernels of the compute device on devx memory) this
// process has opened: what "no ATen compute" is measured by.
uint64_t compute_calls();

// A compute-device kernel's NotImplementedError ("\"sum_cpu\" not implemented for 'ComplexHalf'",
// "Could not run ... from the 'CPU' backend") names the compute device: this adds that the devx op
// `op` ran that device's kernel, so that the user does not look for a CPU tensor of their own.
void explain_compute_error(c10::Error& error, const char* op);

// Installs the routing compute-device allocator. Called once the vendor is known.
void install_compute_routing(int compute_device_type);
int compute_device_type();
// The compute-device view of devx device `device` (the CPU, or the same index of the compute device).
c10::Device compute_device_for(c10::DeviceIndex device);

}  // namespace devx
