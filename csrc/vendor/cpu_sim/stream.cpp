#include "stream.h"

#include <cxxabi.h>

#include <exception>

#include "error.h"

namespace devx::cpu_sim {
namespace {

// Runs `work` and returns the message of what it threw ("" if nothing), so that no kernel's
// exception unwinds through the C table or out of a worker thread.
std::string run_catching(void (*call)(void*), void* arg) {
  try {
    call(arg);
  } catch (abi::__forced_unwind&) {
    // pthread_exit unwinds with this (CPython does it to threads that enter the interpreter
    // while it finalises); swallowing it would abort the process.
    throw;
  } catch (const std::exception& e) {
    return *e.what() ? e.what() : "an exception with an empty message";
  } catch (...) {
    return "an exception not derived from std::exception";
  }
  return {};
}

std::string run_catching(const Stream::Work& work) {
  return run_catching([](void* w) { (*static_cast<const Stream::Work*>(w))(); },
                      const_cast<void*>(static_cast<const void*>(&work)));
}

}  // namespace

DevxStatus Stream::run_now(int device, void (*call)(void*), void* arg) {
  const std::string error = run_catching(call, arg);
  if (error.empty()) return DEVX_OK;
  return fail(DEVX_ERROR, "a host function on cpu_sim device " + std::to_string(device) + " threw: " + error);
}

void Stream::start_worker() {
  async_ = true;
  worker_ = std::thread(&Stream::run_worker, this, shared_from_this());
}

DevxStatus Stream::submit(Work work) {
  // Work the stream's own worker submits (a vendor kernel called by an issued op) belongs to the
  // item running now: queued at the end, it would run after work the host issued later.
  if (runs_now()) {
    return run_now(device_, [](void* w) { (*static_cast<Work*>(w))(); }, &work);
  }
  {
    std::lock_guard lock(mu_);
    if (stop_) return fail(DEVX_ERROR, "cpu_sim stream used after it was shut down");
    queue_.push_back(std::move(work));
    ++submitted_;
  }
  work_cv_.notify_one();
  return DEVX_OK;
}

DevxStatus Stream::synchronize() {
  if (async_ && t_running_ == this) {
    return fail(DEVX_ERROR, "a host function on cpu_sim device " + std::to_string(device_) +
                                " synchronized its own stream, which would wait for itself");
  }
  std::unique_lock lock(mu_);
  const uint64_t target = submitted_;
  while (completed_ < target && !exited_) {
    if (!running_ && !queue_.empty() && !stop_) {
      run_next(lock);
    } else {
      done_cv_.wait(lock);
    }
  }
  if (error_.empty()) return DEVX_OK;
  const std::string error = std::move(error_);
  error_.clear();
  lock.unlock();
  return fail(DEVX_ERROR, "a host function on cpu_sim device " + std::to_string(device_) +
                              " threw: " + error);
}

bool Stream::idle() {
  std::lock_guard lock(mu_);
  return completed_ == submitted_;
}

std::string Stream::pending_error() {
  std::lock_guard lock(mu_);
  return error_;
}

void Stream::wait_event(Event& event, uint64_t recording) {
  {
    std::lock_guard lock(mu_);
    waiting_on_ = &event;
  }
  event.wait(recording, stop_);
  std::lock_guard lock(mu_);
  waiting_on_ = nullptr;
}

void Stream::stop_worker() {
  std::lock_guard lock(mu_);
  stop_ = true;
  // Dropped work counts as never submitted, so a synchronize still returns.
  submitted_ -= queue_.size();
  queue_.clear();
  // Under mu_, which wait_event takes before its event can go away.
  if (waiting_on_ != nullptr) waiting_on_->wake();
  work_cv_.notify_all();
}

void Stream::join_worker() {
  if (!worker_.joinable()) return;
  // A host function destroying its own stream: the worker exits once that function returns.
  if (worker_.get_id() == std::this_thread::get_id()) {
    worker_.detach();
  } else {
    worker_.join();
  }
}

void Stream::join_worker_until(Clock::time_point deadline) {
  if (!worker_.joinable()) return;
  std::unique_lock lock(mu_);
  const bool exited = done_cv_.wait_until(lock, deadline, [&] { return exited_; });
  lock.unlock();
  if (exited) {
    worker_.join();
  } else {
    worker_.detach();
  }
}

void Stream::run_worker(std::shared_ptr<Stream> /*keep_alive*/) {
  // Set however the thread ends, pthread_exit included, so nobody waits for a thread that is gone.
  struct ExitMark {
    Stream* stream;
    ~ExitMark() {
      {
        std::lock_guard lock(stream->mu_);
        stream->exited_ = true;
      }
      stream->done_cv_.notify_all();
    }
  } exit_mark{this};

  std::unique_lock lock(mu_);
  for (;;) {
    work_cv_.wait(lock, [&] { return stop_ || (!queue_.empty() && !running_); });
    if (stop_) return;
    run_next(lock);
  }
}

void Stream::run_next(std::unique_lock<std::mutex>& lock) {
  // Counts the item done however running it ends: a thread that pthread_exit unwinds (CPython
  // ending threads that enter it while it finalises) must not leave the stream marked busy.
  struct Done {
    Done(Stream* s, std::unique_lock<std::mutex>& l) : stream(s), lock(l), outer(t_running_) {}
    Stream* stream;
    std::unique_lock<std::mutex>& lock;
    const Stream* outer;
    std::string error;
    ~Done() {
      t_running_ = outer;
      lock.lock();
      stream->running_ = false;
      ++stream->completed_;
      if (!error.empty() && stream->error_.empty()) stream->error_ = std::move(error);
      // A host waits for completion; the worker waits for the item to be done when a host ran it.
      stream->done_cv_.notify_all();
      if (!stream->queue_.empty()) stream->work_cv_.notify_one();
    }
  };
  Work work = std::move(queue_.front());
  queue_.pop_front();
  running_ = true;
  lock.unlock();
  Done done(this, lock);
  t_running_ = this;
  done.error = run_catching(work);
  work = nullptr;  // drop what it captured (events) before anyone sees it complete
}

}  // namespace devx::cpu_sim
