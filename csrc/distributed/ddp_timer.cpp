// DistributedDataParallel's timer for devx: the forward, backward and communication times of its
// runtime statistics (`_get_ddp_logging_data()`, the DDP logger) measured with devx events on the
// current stream, as CUDA's timer measures them with CUDA events. Without it DDP warns that time
// stats are only collected for CPU and CUDA and falls back to host times.
#include <c10/core/DeviceGuard.h>
#include <c10/core/Event.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/csrc/distributed/c10d/reducer_timer.hpp>

#include <array>

#include "runtime/device.h"

namespace devx::dist {
namespace {

constexpr int64_t kNanosPerMilli = 1000000;

class DevxTimer final : public c10d::Timer {
 public:
  explicit DevxTimer(c10::Device device) : device_(device) {}

  void record(Event event) override {
    c10d::Timer::record(event);
    c10::DeviceGuard guard(device_);
    const c10::Stream stream = c10::impl::getDeviceGuardImpl(kDevx)->getStream(device_);
    event_of(event).record(stream);
  }

  std::optional<int64_t> measureDifference(Event start, Event end) override {
    c10::DeviceGuard guard(device_);
    c10::Event& start_event = event_of(start);
    c10::Event& end_event = event_of(end);
    // An event never recorded (no backward, or a no_sync iteration) has nothing to measure.
    if (!start_event.was_marked_for_recording() || !end_event.was_marked_for_recording()) return std::nullopt;
    // DDP asks at the next iteration's forward, when the previous one's work is done or nearly.
    start_event.synchronize();
    end_event.synchronize();
    const double ms = start_event.elapsedTime(end_event);
    if (ms < 0) return std::nullopt;
    return static_cast<int64_t>(ms * kNanosPerMilli);
  }

 private:
  c10::Event& event_of(Event event) { return events_[static_cast<size_t>(event)]; }

  c10::Device device_;
  std::array<c10::Event, 5> events_{
      c10::Event(kDevx, c10::EventFlag::BACKEND_DEFAULT), c10::Event(kDevx, c10::EventFlag::BACKEND_DEFAULT),
      c10::Event(kDevx, c10::EventFlag::BACKEND_DEFAULT), c10::Event(kDevx, c10::EventFlag::BACKEND_DEFAULT),
      c10::Event(kDevx, c10::EventFlag::BACKEND_DEFAULT)};
};

}  // namespace
}  // namespace devx::dist

namespace c10d {
C10_REGISTER_TYPED_CLASS(TimerRegistry, c10::kPrivateUse1, devx::dist::DevxTimer)
}  // namespace c10d
