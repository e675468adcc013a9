// An ordered queue of device work. In sync mode work runs on the caller's thread as it is
// submitted; in async mode a worker thread per stream runs it, so the host really overlaps with
// the "device" and missing synchronisation in the core shows up as wrong results.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "event.h"
#include "runtime/vendor_api.h"

namespace devx::cpu_sim {

class Stream : public std::enable_shared_from_this<Stream> {
 public:
  using Work = std::function<void()>;

  explicit Stream(int device) : device_(device) {}
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  int device() const { return device_; }

  // Async mode: from here on, submitted work runs on this stream's own thread. Called before
  // the stream is shared with other threads.
  void start_worker();

  // Runs `work` after all work submitted before it. Without a worker it runs now, and an
  // exception it throws is returned as DEVX_ERROR; with one, it is reported by synchronize().
  DevxStatus submit(Work work);
  // Whether submit() runs work now, on the calling thread: no worker, or this is the worker (a
  // vendor kernel called by work it runs).
  bool runs_now() const { return !async_ || t_running_ == this; }
  // Runs call(arg) as submit() runs work now on a stream of `device`: an exception it throws is
  // returned as DEVX_ERROR. (Kernels that run now call this without wrapping their work in a Work.)
  static DevxStatus run_now(int device, void (*call)(void*), void* arg);
  // Waits for all work submitted so far; DEVX_ERROR if any of it threw since the last call.
  // While the worker runs no item, the caller runs the queued ones itself, in order: a host that
  // must wait anyway does the work instead of sleeping until the worker has done it (two thread
  // wake-ups per wait, which a model with a host read per op paid for in most of its step).
  DevxStatus synchronize();
  bool idle();
  // The error of work that threw since the last synchronize(), "" if none (it stays to be reported).
  std::string pending_error();

  // Work on this stream: holds the stream until `event` reaches `recording`.
  void wait_event(Event& event, uint64_t recording);

  // Shutting down: drops work not yet started and wakes a worker blocked in wait_event; the
  // work already running finishes. Later submissions fail.
  void stop_worker();
  void join_worker();
  // At process exit a worker may be stuck for good (in a host function calling into a finalised
  // Python, say): past `deadline` it is detached, and it holds its own reference to the stream.
  void join_worker_until(Clock::time_point deadline);

 private:
  void run_worker(std::shared_ptr<Stream> keep_alive);
  // With mu_ held through `lock` and an item queued that nobody runs: runs it on this thread
  // (unlocked) and counts it done.
  void run_next(std::unique_lock<std::mutex>& lock);

  // The stream whose item this thread runs now (its worker, or a host helping in synchronize).
  inline static thread_local const Stream* t_running_ = nullptr;

  const int device_;
  bool async_ = false;
  std::thread worker_;

  std::mutex mu_;
  std::condition_variable work_cv_;  // worker: work arrived or stop
  std::condition_variable done_cv_;  // host: work finished or the worker exited
  std::deque<Work> queue_;
  bool running_ = false;  // an item is being run (by the worker or a helping host)
  uint64_t submitted_ = 0;
  uint64_t completed_ = 0;
  std::string error_;            // first exception since the last synchronize
  Event* waiting_on_ = nullptr;  // what wait_event is blocked on, for stop_worker to wake
  bool exited_ = false;
  std::atomic<bool> stop_{false};
};

}  // namespace devx::cpu_sim
