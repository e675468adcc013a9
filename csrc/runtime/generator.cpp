#include "runtime/generator.h"

#include <memory>
#include <mutex>
#include <vector>

#include "runtime/device.h"

namespace devx {

DevxGeneratorImpl::DevxGeneratorImpl(c10::DeviceIndex device, uint64_t seed)
    : c10::GeneratorImpl(devx_device(device), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1)),
      compute_(at::make_generator<at::CPUGeneratorImpl>(seed)) {}

void DevxGeneratorImpl::set_current_seed(uint64_t seed) { compute_.set_current_seed(seed); }
void DevxGeneratorImpl::set_offset(uint64_t offset) { compute_.set_offset(offset); }
uint64_t DevxGeneratorImpl::get_offset() const { return compute_.get_offset(); }
uint64_t DevxGeneratorImpl::current_seed() const { return compute_.current_seed(); }
uint64_t DevxGeneratorImpl::seed() { return compute_.seed(); }

void DevxGeneratorImpl::set_state(const c10::TensorImpl& new_state) {
  compute_.unsafeGetGeneratorImpl()->set_state(new_state);
}

c10::intrusive_ptr<c10::TensorImpl> DevxGeneratorImpl::get_state() const {
  return compute_.unsafeGetGeneratorImpl()->get_state();
}

DevxGeneratorImpl* DevxGeneratorImpl::clone_impl() const {
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
