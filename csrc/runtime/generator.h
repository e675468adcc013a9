// The devx random generator. On a vendor whose kernels are ATen's CPU kernels, the random ops
// must draw from a CPUGeneratorImpl; a devx generator therefore owns one and delegates to it, so
// that the same seed gives exactly the CPU's numbers (whole runs can be compared with the CPU).
#pragma once

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/Generator.h>
#include <c10/core/Stream.h>

namespace devx {

class DevxGeneratorImpl final : public c10::GeneratorImpl {
 public:
  explicit DevxGeneratorImpl(c10::DeviceIndex device, uint64_t seed = c10::default_rng_seed_val);

  void set_current_seed(uint64_t seed) override;
  void set_offset(uint64_t offset) override;
  uint64_t get_offset() const override;
  uint64_t current_seed() const override;
  uint64_t seed() override;
  void set_state(const c10::TensorImpl& new_state) override;
  c10::intrusive_ptr<c10::TensorImpl> get_state() const override;

  // The generator ATen's kernels of the compute device draw from.
  const at::Generator& compute_generator() const { return compute_; }

  static c10::DeviceType device_type() { return c10::DeviceType::PrivateUse1; }

 private:
  DevxGeneratorImpl* clone_impl() const override;
  at::Generator compute_;
};

const at::Generator& default_generator(c10::DeviceIndex device);
at::Generator make_generator(c10::DeviceIndex device);

// Asynchronous streams (g_async_host_streams): a random op issued to a stream draws from its
// generator when its kernel runs on the stream's worker. Draws stay in host order: the issuer
// calls note_issued_draw as it issues one (which first waits for the draws issued to another
// stream of the device), and every host access to a devx generator's state (seeding,
// get/set_rng_state, clones, the own kernels' seeds) first waits for the draws issued.
void note_issued_draw(c10::DeviceIndex device, c10::StreamId stream);
void wait_for_issued_draws(c10::DeviceIndex device);

// The generator to hand to the compute device's kernel for a devx op's `generator` argument
// (the devx default generator of `device` when none was given).
at::Generator compute_generator_for(const std::optional<at::Generator>& gen, c10::DeviceIndex device);

}  // namespace devx
