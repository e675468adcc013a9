#include "python/cuda_alias.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/csrc/utils/device_lazy_init.h>
#include <torch/library.h>

#include <memory>
#include <vector>

#include "runtime/device.h"

namespace devx {
namespace {

c10::Device to_devx(c10::Device d) {
  return c10::Device(kDevx, d.index());
}

c10::Device to_cuda(c10::Device d) {
  return c10::Device(c10::kCUDA, d.index());
}

c10::Stream stream_to(c10::Stream s, c10::Device device) {
  return c10::Stream(c10::Stream::UNSAFE, device, s.id());
}

// A devx stream as the CUDA stream of the same index and id (a device given as "cuda", index -1,
// resolves to the stream's own device).
c10::Stream as_cuda(c10::Stream s) {
  return stream_to(s, to_cuda(s.device()));
}

// The CUDA device type's guard, forwarding to devx's: indices and stream ids are the same.
struct CudaAsDevxGuard final : public c10::impl::DeviceGuardImplInterface {
  const c10::impl::DeviceGuardImplInterface* devx() const { return c10::impl::getDeviceGuardImpl(kDevx); }

  c10::DeviceType type() const override { return c10::kCUDA; }
  c10::Device exchangeDevice(c10::Device d) const override { return to_cuda(devx()->exchangeDevice(to_devx(d))); }
  c10::Device getDevice() const override { return to_cuda(devx()->getDevice()); }
  void setDevice(c10::Device d) const override { devx()->setDevice(to_devx(d)); }
  void uncheckedSetDevice(c10::Device d) const noexcept override { devx()->uncheckedSetDevice(to_devx(d)); }
  c10::Stream getStream(c10::Device d) const override { return as_cuda(devx()->getStream(to_devx(d))); }
  c10::Stream getDefaultStream(c10::Device d) const override { return as_cuda(devx()->getDefaultStream(to_devx(d))); }
  c10::Stream exchangeStream(c10::Stream s) const override {
    return as_cuda(devx()->exchangeStream(stream_to(s, to_devx(s.device()))));
  }
  c10::Stream getStreamFromGlobalPool(c10::Device d, bool high_priority) const override {
    return as_cuda(devx()->getStreamFromGlobalPool(to_devx(d), high_priority));
  }
  c10::Stream getNewStream(c10::Device d, int priority) const override {
    return as_cuda(devx()->getNewStream(to_devx(d), priority));
  }
  c10::DeviceIndex deviceCount() const noexcept override { return devx()->deviceCount(); }
  // Events are devx events: torch.Event(device="cuda") records on, and blocks, devx streams.
  void record(void** event, const c10::Stream& s, const c10::DeviceIndex index,
              const c10::EventFlag flag) const override {
    devx()->record(event, stream_to(s, to_devx(s.device())), index, flag);
  }
  void block(void* event, const c10::Stream& s) const override {
    devx()->block(event, stream_to(s, to_devx(s.device())));
  }
  bool queryEvent(void* event) const override { return devx()->queryEvent(event); }
  void destroyEvent(void* event, const c10::DeviceIndex index) const noexcept override {
    devx()->destroyEvent(event, index);
  }
  void synchronizeEvent(void* event) const override { devx()->synchronizeEvent(event); }
  double elapsedTime(void* start, void* end, const c10::DeviceIndex index) const override {
    return devx()->elapsedTime(start, end, index);
  }
  bool queryStream(const c10::Stream& s) const override { return devx()->queryStream(stream_to(s, to_devx(s.device()))); }
  void synchronizeStream(const c10::Stream& s) const override {
    devx()->synchronizeStream(stream_to(s, to_devx(s.device())));
  }
  void synchronizeDevice(const c10::DeviceIndex index) const override { devx()->synchronizeDevice(index); }
#if __has_include(<c10/core/DeviceCapability.h>)
  c10::DeviceCapability getDeviceCapability(c10::Device d) const override {
    return devx()->getDeviceCapability(to_devx(d));
  }
#endif
};

// Any op that reaches the CUDA key carries a "cuda" device argument (no CUDA tensor exists in a
// CPU build): it runs again with devx devices.
void run_on_devx(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const size_t n = op.schema().arguments().size();
  bool mapped = false;
  for (auto it = stack->end() - static_cast<std::ptrdiff_t>(n); it != stack->end(); ++it) {
    if (it->isDevice() && it->toDevice().type() == c10::kCUDA) {
      *it = to_devx(it->toDevice());
      mapped = true;
    }
  }
  TORCH_CHECK(mapped, "torch_devx's CUDA mocking does not cover ", op.schema().operator_name(),
              " called this way (it reached CUDA without a device argument); use device='devx' or report it");
  op.callBoxed(stack);
}

CudaAsDevxGuard g_guard;
// One per key a "cuda" device argument can select: a quantized dtype or a sparse layout picks its
// own CUDA key (torch.empty(2, dtype=torch.qint8, device="cuda"), torch.zeros(.., layout=torch.sparse_coo, ..)).
std::vector<std::unique_ptr<torch::Library>> g_fallbacks;
constexpr c10::DispatchKey kCudaKeys[] = {c10::DispatchKey::CUDA, c10::DispatchKey::QuantizedCUDA,
                                          c10::DispatchKey::SparseCUDA, c10::DispatchKey::SparseCsrCUDA,
                                          c10::DispatchKey::NestedTensorCUDA};

bool torch_has_cuda() {
  if (c10::impl::hasDeviceGuardImpl(c10::kCUDA)) return true;
  auto empty = c10::Dispatcher::singleton().findSchema({"aten::empty", "memory_format"});
  return empty && empty->hasKernelForDispatchKey(c10::DispatchKey::CUDA);
}

}  // namespace

bool install_cuda_alias() {
  if (!g_fallbacks.empty()) return true;
  if (torch_has_cuda()) return false;
  for (c10::DispatchKey key : kCudaKeys) {
    auto library = std::make_unique<torch::Library>(torch::Library::IMPL, "_", key, __FILE__, __LINE__);
    library->fallback(torch::CppFunction::makeFromBoxedFunction<&run_on_devx>());
    g_fallbacks.push_back(std::move(library));
  }
  c10::impl::device_guard_impl_registry[static_cast<size_t>(c10::kCUDA)].store(&g_guard);
  torch::utils::set_requires_device_init(c10::kCUDA, false);
  return true;
}

void uninstall_cuda_alias() {
  if (g_fallbacks.empty()) return;
  torch::utils::set_requires_device_init(c10::kCUDA, true);
  c10::impl::device_guard_impl_registry[static_cast<size_t>(c10::kCUDA)].store(nullptr);
  g_fallbacks.clear();
}

bool cuda_alias_installed() {
  return !g_fallbacks.empty();
}

}  // namespace devx
