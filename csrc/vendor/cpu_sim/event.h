// A marker in a stream's work, with the time the stream got there.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>

namespace devx::cpu_sim {

using Clock = std::chrono::steady_clock;

// Recordings are numbered: `recorded` counts event_record calls, `reached` is the newest
// recording a stream has got to. A wait remembers the number current when it was issued, so
// re-recording the event afterwards does not move what the wait is for (CUDA's semantics).
class Event {
 public:
  struct Snapshot {
    uint64_t recorded;
    uint64_t reached;
    Clock::time_point stamp;  // when `reached` was reached
    // The error the recording stream held (unreported) when it reached `reached`, "" if none:
    // work that waits for the event inherits it, as CUDA's errors reach the work that depends on
    // a failed kernel.
    std::string error;
  };

  Event(int device, bool timing) : device_(device), timing_(timing) {}

  int device() const { return device_; }
  bool timing() const { return timing_; }

  // Host side, at event_record: the number of the new recording.
  uint64_t begin_recording();
  // Stream side, when the stream's work reaches `recording`; `error` as in Snapshot.
  void reach(uint64_t recording, std::string error);

  Snapshot snapshot();
  // Blocks until `recording` is reached, or `abandon` is set and wake() called.
  void wait(uint64_t recording, const std::atomic<bool>& abandon);
  void wake();

 private:
  const int device_;
  const bool timing_;
  std::mutex mu_;
  std::condition_variable cv_;
  uint64_t recorded_ = 0;
  uint64_t reached_ = 0;
  Clock::time_point stamp_;
  std::string error_;
};

}  // namespace devx::cpu_sim
