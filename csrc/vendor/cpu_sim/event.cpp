#include "event.h"

namespace devx::cpu_sim {

uint64_t Event::begin_recording() {
  std::lock_guard lock(mu_);
  return ++recorded_;
}

void Event::reach(uint64_t recording, std::string error) {
  const Clock::time_point now = Clock::now();
  {
    std::lock_guard lock(mu_);
    // Recordings on different streams can complete out of order; a late older one must not
    // take the newer one's place.
    if (recording <= reached_) return;
    reached_ = recording;
    stamp_ = now;
    error_ = std::move(error);
  }
  cv_.notify_all();
}

Event::Snapshot Event::snapshot() {
  std::lock_guard lock(mu_);
  return {recorded_, reached_, stamp_, error_};
}

void Event::wait(uint64_t recording, const std::atomic<bool>& abandon) {
  std::unique_lock lock(mu_);
  cv_.wait(lock, [&] { return reached_ >= recording || abandon.load(); });
}

void Event::wake() {
  // Taking the lock orders this with a waiter's check of `abandon`, so the wake cannot be lost.
  std::lock_guard lock(mu_);
  cv_.notify_all();
}

}  // namespace devx::cpu_sim
