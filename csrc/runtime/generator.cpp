#include "runtime/generator.h"

#include <memory>
#include <mutex>
#include <vector>

#include "runtime/device.h"
#include "runtime/stream.h"
#include "runtime/vendor.h"

namespace devx {

DevxGeneratorImpl::DevxGeneratorImpl(c10::DeviceIndex device, uint64_t seed)
    : c10::GeneratorImpl(devx_device(device), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1)),
      compute_(at::make_generator<at::CPUGeneratorImpl>(seed)) {}

namespace {

// Per device: the stream the random ops issued since the last wait went to (-1: none), under
// the device's mutex (taken only by random ops and generator accesses).
struct IssuedDraws {
  std::mutex mutex;
  c10::StreamId stream = -1;
};

IssuedDraws& issued_draws(c10::DeviceIndex device) {
  static std::vector<std::unique_ptr<IssuedDraws>> draws = [] {
    std::vector<std::unique_ptr<IssuedDraws>> d;
    for (c10::DeviceIndex i = 0; i < device_count(); ++i) d.push_back(std::make_unique<IssuedDraws>());
    return d;
  }();
  return *draws.at(device);
}

void wait_for_stream(c10::DeviceIndex device, c10::StreamId stream) {
  DevxStream(c10::Stream(c10::Stream::UNSAFE, devx_device(device), stream)).synchronize();
}

}  // namespace

void note_issued_draw(c10::DeviceIndex device, c10::StreamId stream) {
  IssuedDraws& draws = issued_draws(device);
  std::lock_guard<std::mutex> lock(draws.mutex);
  if (draws.stream >= 0 && draws.stream != stream) wait_for_stream(device, draws.stream);
  draws.stream = stream;
}

void wait_for_issued_draws(c10::DeviceIndex device) {
  // Work on a stream draws in its stream's order already (and may not wait for itself).
  if (!g_async_host_streams || on_stream_work() || device < 0 || device >= device_count()) return;
  IssuedDraws& draws = issued_draws(device);
  std::lock_guard<std::mutex> lock(draws.mutex);
  if (draws.stream < 0) return;
  wait_for_stream(device, draws.stream);
  draws.stream = -1;
}

void DevxGeneratorImpl::set_current_seed(uint64_t seed) {
  wait_for_issued_draws(device().index());
  compute_.set_current_seed(seed);
}
void DevxGeneratorImpl::set_offset(uint64_t offset) {
  wait_for_issued_draws(device().index());
  compute_.set_offset(offset);
}
uint64_t DevxGeneratorImpl::get_offset() const {
  wait_for_issued_draws(device().index());
  return compute_.get_offset();
}
uint64_t DevxGeneratorImpl::current_seed() const {
  wait_for_issued_draws(device().index());
  return compute_.current_seed();
}
uint64_t DevxGeneratorImpl::seed() {
  wait_for_issued_draws(device().index());
  return compute_.seed();
}

void DevxGeneratorImpl::set_state(const c10::TensorImpl& new_state) {
  wait_for_issued_draws(device().index());
  compute_.unsafeGetGeneratorImpl()->set_state(new_state);
}

c10::intrusive_ptr<c10::TensorImpl> DevxGeneratorImpl::get_state() const {
  wait_for_issued_draws(device().index());
  return compute_.unsafeGetGeneratorImpl()->get_state();
}

DevxGeneratorImpl* DevxGeneratorImpl::clone_impl() const {
  wait_for_issued_draws(device().index());
  auto* copy = new DevxGeneratorImpl(device().index());
  copy->compute_ = compute_.clone();
  return copy;
}

const at::Generator& default_generator(c10::DeviceIndex device) {
  static std::vector<at::Generator> generators = [] {
    std::vector<at::Generator> g;
    for (c10::DeviceIndex i = 0; i < device_count(); ++i) g.push_back(at::make_generator<DevxGeneratorImpl>(i));
    return g;
  }();
  if (device < 0) device = current_device();
  check_device_index(device);
  return generators[device];
}

at::Generator make_generator(c10::DeviceIndex device) {
  if (device < 0) device = current_device();
  check_device_index(device);
  return at::make_generator<DevxGeneratorImpl>(device);
}

at::Generator compute_generator_for(const std::optional<at::Generator>& gen, c10::DeviceIndex device) {
  if (gen.has_value() && gen->defined()) {
    TORCH_CHECK(gen->device().type() == kDevx, "devx: expected a devx generator, got one for ",
                gen->device());
    return static_cast<DevxGeneratorImpl*>(gen->unsafeGetGeneratorImpl())->compute_generator();
  }
  return static_cast<DevxGeneratorImpl*>(default_generator(device).unsafeGetGeneratorImpl())->compute_generator();
}

}  // namespace devx
