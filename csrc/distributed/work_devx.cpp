#include "distributed/work_devx.h"

#include <ATen/core/ivalue.h>
#include <c10/core/impl/VirtualGuardImpl.h>

#include "aten/compute_scope.h"

namespace devx::dist {

namespace {

// Where the engine computes on a device (NCCL on the cuda vendor's aliases), its wait() orders
// only the compute device's current stream; the host waits for that stream too, so that the
// devx stream, which the engine does not know, sees the result. A host engine (gloo on cpu_sim)
// has finished with the bytes when its wait() returns.
void wait_for_engine_stream(const std::vector<at::Tensor>& outputs) {
  const int type = compute_device_type();
  if (type < 0 || type == static_cast<int>(c10::kCPU)) return;
  c10::impl::VirtualGuardImpl impl(static_cast<c10::DeviceType>(type));
  for (const at::Tensor& t : outputs) {
    if (t.defined() && t.device().type() == c10::kPrivateUse1) {
      impl.getStream(c10::Device(static_cast<c10::DeviceType>(type), t.device().index())).synchronize();
      return;
    }
  }
}

}  // namespace

void rethrow_engine_error(const std::string& what, const std::string& engine_name) {
  try {
    throw;
  } catch (const c10::Error& e) {
    C10_THROW_ERROR(DistBackendError, "devx: " + what + " failed in the " + engine_name +
                                          " engine (a rank that exited, crashed or timed out "
                                          "shows up here): " + e.what_without_backtrace());
  } catch (const std::exception& e) {
    C10_THROW_ERROR(DistBackendError, "devx: " + what + " failed in the " + engine_name +
                                          " engine: " + e.what());
  }
}

WorkDevx::WorkDevx(c10::intrusive_ptr<c10d::Work> engine_work, std::vector<at::Tensor> outputs, int rank,
                   c10d::OpType type, std::string what, std::string engine_name,
                   std::shared_ptr<sanitizer::DeviceWorkHold> hold, std::shared_ptr<PredictedCall> predicted,
                   std::shared_ptr<CallLedger> ledger)
    : c10d::Work(rank, type),
      engine_work_(std::move(engine_work)),
      outputs_(std::move(outputs)),
      what_(std::move(what)),
      engine_name_(std::move(engine_name)),
      hold_(std::move(hold)),
      predicted_(std::move(predicted)),
      ledger_(std::move(ledger)) {
  if (!hold_) return;
  // Released when the engine completes, even if nobody waits; work without a future (gloo's
  // send/recv) releases it in wait(), or when it is dropped.
  try {
    engine_work_->getFuture()->addCallback([hold = hold_](c10::ivalue::Future&) { hold->release(); });
  } catch (const std::exception&) {
  }
}

bool WorkDevx::isCompleted() {
  const bool done = engine_work_->isCompleted();
  if (done && hold_) hold_->release();
  if (done && predicted_ && !predicted_->settled.load()) {
    // Done as far as this rank can tell, unless the result calls for a confirmation.
    return engine_work_->isSuccess() && !predicted_->doubted();
  }
  return done;
}

bool WorkDevx::isSuccess() const {
  if (predicted_ && predicted_->settled.load() && predicted_->error) return false;
  return engine_work_->isSuccess();
}

std::exception_ptr WorkDevx::exception() const {
  if (predicted_ && predicted_->settled.load() && predicted_->error) return predicted_->error;
  return engine_work_->exception();
}

void WorkDevx::settle() {
  if (!predicted_) return;
  {
    auto lock = ledger_->lock();
    ledger_->settle(*predicted_);
  }
  if (predicted_->error) std::rethrow_exception(predicted_->error);
}

int WorkDevx::sourceRank() const {
  return engine_work_->sourceRank();
}

std::vector<at::Tensor> WorkDevx::result() {
  return outputs_;
}

void WorkDevx::synchronize() {
  engine_work_->synchronize();
  wait_for_engine_stream(outputs_);
  if (hold_) hold_->release();
  settle();
}

bool WorkDevx::wait(std::chrono::milliseconds timeout) {
  bool done = false;
  try {
    done = engine_work_->wait(timeout);
  } catch (...) {
    rethrow_engine_error(what_, engine_name_);
  }
  wait_for_engine_stream(outputs_);
  if (done && hold_) hold_->release();
  if (done) settle();
  return done;
}

void WorkDevx::abort() {
  engine_work_->abort();
}

c10::intrusive_ptr<c10::ivalue::Future> WorkDevx::getFuture() {
  std::lock_guard<std::mutex> lock(future_mutex_);
  if (future_) return future_;
  c10::intrusive_ptr<c10::ivalue::Future> engine_future;
  try {
    engine_future = engine_work_->getFuture();
  } catch (...) {
    rethrow_engine_error(what_ + " (getFuture)", engine_name_);
  }
  // A host-side future, as gloo's for CPU tensors: it completes once the engine has finished
  // with the bytes, and its value is the caller's devx tensors.
  future_ = c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()));
  if (predicted_) {
    {
      // Under the ledger's lock a settle either has run (and the future is completed here) or
      // will see the future and complete it.
      auto lock = ledger_->lock();
      predicted_->future = future_;
      if (predicted_->settled.load()) {
        predicted_->complete_future();
        return future_;
      }
    }
    // A failed or doubted call's future is completed when the ledger has settled it.
    engine_future->addCallback([call = predicted_](c10::ivalue::Future& done) {
      if (!done.hasError() && !call->doubted()) call->complete_future();
    });
    return future_;
  }
  engine_future->addCallback(
      [future = future_, outputs = outputs_, what = what_, engine = engine_name_](c10::ivalue::Future& done) {
        if (done.hasError()) {
          try {
            std::rethrow_exception(done.exception_ptr());
          } catch (...) {
            try {
              rethrow_engine_error(what, engine);
            } catch (...) {
              future->setError(std::current_exception());
            }
          }
          return;
        }
        try {
          wait_for_engine_stream(outputs);
          future->markCompleted(c10::IValue(outputs));
        } catch (...) {
          future->setError(std::current_exception());
        }
      });
  return future_;
}

}  // namespace devx::dist
