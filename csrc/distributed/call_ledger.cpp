#include "distributed/call_ledger.h"

#include <ATen/Dispatch.h>
#include <ATen/ops/empty.h>
#include <c10/util/Exception.h>

#include <cmath>
#include <condition_variable>
#include <limits>
#include <thread>

#include "distributed/issue_state.h"
#include "distributed/work_devx.h"
#include "runtime/sanitizer.h"

namespace devx::dist {

namespace {

using RedOp = c10d::ReduceOp::RedOpType;

// Bounds the history of a program that never repeats itself; every rank clears it at the same call.
constexpr size_t kMaxTransitions = 4096;
// A transition seen this many times in a row is predicted.
constexpr int kStreakToPredict = 2;

bool is_float(c10::ScalarType t) {
  return t == at::kFloat || t == at::kDouble || t == at::kHalf || t == at::kBFloat16;
}

bool is_int(c10::ScalarType t) {
  return t == at::kByte || t == at::kChar || t == at::kShort || t == at::kInt || t == at::kLong;
}

// The value that any reduction with it yields again (or NaN): what a rank that did not make the
// predicted call contributes, so that every rank sees it in the result.
at::Scalar absorbing_value(const BlindAllreduce& form) {
  if (is_float(form.dtype)) {
    if (form.op == RedOp::MAX) return std::numeric_limits<double>::infinity();
    if (form.op == RedOp::MIN) return -std::numeric_limits<double>::infinity();
    return std::numeric_limits<double>::quiet_NaN();
  }
  int64_t value = 0;
  AT_DISPATCH_INTEGRAL_TYPES(form.dtype, "absorbing_value", [&] {
    value = form.op == RedOp::MAX ? static_cast<int64_t>(std::numeric_limits<scalar_t>::max())
                                  : static_cast<int64_t>(std::numeric_limits<scalar_t>::min());
  });
  return value;
}

// Reads the first element of the engine's (host) view of the result.
bool holds_absorbing_value(const at::Tensor& result, const BlindAllreduce& form) {
  // The bytes are devx memory: reading them is device work to the sanitizer.
  sanitizer::DeviceAccess access;
  if (is_float(form.dtype)) {
    double v = 0;
    AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, form.dtype, "holds_absorbing_value", [&] {
      v = static_cast<double>(*result.const_data_ptr<scalar_t>());
    });
    if (std::isnan(v)) return true;
    if (form.op == RedOp::MAX) return v == std::numeric_limits<double>::infinity();
    if (form.op == RedOp::MIN) return v == -std::numeric_limits<double>::infinity();
    return false;
  }
  int64_t v = 0;
  AT_DISPATCH_INTEGRAL_TYPES(form.dtype, "holds_absorbing_value",
                             [&] { v = static_cast<int64_t>(*result.const_data_ptr<scalar_t>()); });
  return v == absorbing_value(form).toLong();
}

// The threads that settle doubted or failed calls (CallLedger::track). They are detached, since
// nothing may wait for them on the engine's thread, but counted, so that a group's shutdown and
// the interpreter's exit wait for them: one that outlived the interpreter would die on its way to
// the GIL (a settled call completes its work's future, whose callbacks may be Python, and drops
// tensors that may hold Python objects), inside a noexcept frame: std::terminate.
class SettleThreads {
 public:
  void started() {
    std::lock_guard<std::mutex> lock(mutex_);
    ++running_;
  }
  void ended() {
    std::lock_guard<std::mutex> lock(mutex_);
    if (--running_ == 0) idle_.notify_all();
  }
  void wait_idle() {
    std::unique_lock<std::mutex> lock(mutex_);
    idle_.wait(lock, [this] { return running_ == 0; });
  }

 private:
  std::mutex mutex_;
  std::condition_variable idle_;
  int running_ = 0;
};

SettleThreads& settle_threads() {
  // Never destroyed: a thread may end while static objects are being torn down.
  static SettleThreads* threads = new SettleThreads();
  return *threads;
}

}  // namespace

void wait_for_settle_threads() {
  settle_threads().wait_idle();
}

std::optional<BlindAllreduce> blind_form(at::TensorList tensors, const c10d::ReduceOp& op) {
  if (tensors.size() != 1 || tensors[0].numel() == 0) return std::nullopt;
  const c10::ScalarType dtype = tensors[0].scalar_type();
  const RedOp kind = op.op_;
  const bool float_op = kind == RedOp::SUM || kind == RedOp::AVG || kind == RedOp::PRODUCT || kind == RedOp::MAX ||
                        kind == RedOp::MIN;
  const bool int_op = kind == RedOp::MAX || kind == RedOp::MIN;
  if (!(is_float(dtype) && float_op) && !(is_int(dtype) && int_op)) return std::nullopt;
  return BlindAllreduce{dtype, tensors[0].numel(), kind};
}

std::optional<CallHistory::Prediction> CallHistory::predict() const {
  auto it = next_.find(last_);
  if (it == next_.end() || it->second.streak < kStreakToPredict || !it->second.form) return std::nullopt;
  return Prediction{it->second.hash, *it->second.form};
}

void CallHistory::agree(uint64_t hash, std::optional<BlindAllreduce> form) {
  if (next_.size() >= kMaxTransitions && !next_.count(last_)) next_.clear();
  Successor& successor = next_[last_];
  if (successor.streak > 0 && successor.hash == hash) {
    ++successor.streak;
  } else {
    successor = Successor{hash, 1, form};
  }
  last_ = hash;
}

void CallHistory::forget() {
  next_.clear();
  last_ = 0;
}

PredictedCall::PredictedCall(c10::intrusive_ptr<c10d::Work> work, at::Tensor result, std::vector<at::Tensor> outputs,
                             CallSignature signature, BlindAllreduce form, std::string what)
    : engine_work(std::move(work)),
      result(std::move(result)),
      outputs(std::move(outputs)),
      signature(std::move(signature)),
      form(form),
      what(std::move(what)) {}

void PredictedCall::complete_future() {
  if (!future || future_done.exchange(true)) return;
  if (error) {
    future->setError(error);
  } else {
    future->markCompleted(c10::IValue(outputs));
  }
}

CallLedger::CallLedger(c10::intrusive_ptr<c10d::Backend> check_engine, std::string engine_name, bool predict)
    : check_engine_(std::move(check_engine)), engine_name_(std::move(engine_name)), predict_(predict) {}

void CallLedger::settle_pending() {
  if (!pending_) return;
  std::shared_ptr<PredictedCall> call = std::move(pending_);
  settle(*call);
}

void CallLedger::settle(PredictedCall& call) {
  if (call.settled.load()) return;
  try {
    call.engine_work->wait();
  } catch (...) {
    try {
      rethrow_engine_error(call.what, engine_name_);
    } catch (...) {
      call.error = std::current_exception();
    }
  }
  if (!call.error && call.doubted()) {
    ++confirmations_;
    try {
      check_same_call(*check_engine_, call.signature, engine_name_);
    } catch (...) {
      call.error = std::current_exception();
    }
  }
  if (call.error) {
    history_.forget();
  } else {
    history_.agree(call.signature.hash(), call.form);
  }
  if (pending_.get() == &call) pending_.reset();
  call.settled.store(true);
  call.complete_future();
}

bool CallLedger::is_predicted(const CallSignature& signature) const {
  if (!predict_) return false;
  auto prediction = history_.predict();
  return prediction && prediction->hash == signature.hash();
}

std::shared_ptr<PredictedCall> CallLedger::track(c10::intrusive_ptr<c10d::Work> work, at::Tensor result,
                                                 std::vector<at::Tensor> outputs, CallSignature signature,
                                                 BlindAllreduce form, std::string what) {
  auto call = std::make_shared<PredictedCall>(std::move(work), std::move(result), std::move(outputs),
                                              std::move(signature), form, std::move(what));
  // Callbacks run in the order they were added, so this one runs before any added by getFuture,
  // and before the engine's wait() returns.
  call->engine_work->getFuture()->addCallback([call, ledger = shared_from_this()](c10::ivalue::Future& done) {
    if (!done.hasError()) {
      const bool doubted = holds_absorbing_value(call->result, call->form);
      call->verdict_.store(doubted ? PredictedCall::kDoubted : PredictedCall::kClean);
      if (!doubted) return;
    }
    // Not under the ledger's lock here: its holder may be waiting for this very work.
    SettleThreads& threads = settle_threads();
    threads.started();
    try {
      std::thread([call, ledger, &threads]() mutable {
        {
          auto lock = ledger->lock();
          ledger->settle(*call);
        }
        // Dropped before the thread counts as ended: the last reference to the call's tensors
        // releases their Python objects, which needs an interpreter that is not finalizing.
        call.reset();
        ledger.reset();
        threads.ended();
      }).detach();
    } catch (...) {
      threads.ended();
      throw;
    }
  });
  ++predicted_;
  pending_ = call;
  return call;
}

void CallLedger::check(const CallSignature& signature, std::optional<BlindAllreduce> form) {
  auto prediction = predict_ ? history_.predict() : std::nullopt;
  try {
    if (prediction) {
      // The other ranks may be running the prediction blind: run it too, as a rank that did not
      // make it, then confirm.
      run_blind(prediction->form, signature);
      ++confirmations_;
    } else {
      ++check_rounds_;
    }
    check_same_call(*check_engine_, signature, engine_name_);
  } catch (...) {
    history_.forget();
    throw;
  }
  history_.agree(signature.hash(), form);
}

void CallLedger::run_blind(const BlindAllreduce& form, const CallSignature& signature) {
  at::Tensor scratch = at::empty({form.numel}, at::TensorOptions().dtype(form.dtype));
  scratch.narrow(0, 0, 1).fill_(absorbing_value(form));
  c10d::AllreduceOptions opts;
  // AVG runs as SUM of pre-scaled tensors (process_group_devx.cpp).
  opts.reduceOp = form.op == RedOp::AVG ? c10d::ReduceOp(RedOp::SUM) : c10d::ReduceOp(form.op);
  std::vector<at::Tensor> tensors{scratch};
  WithoutThreadPythonObjects without_python;
  try {
    check_engine_->allreduce(tensors, opts)->wait();
  } catch (...) {
    rethrow_engine_error(signature.text() + ") (the predicted all_reduce run before its cross-rank call check)",
                         engine_name_);
  }
}

CallCheckCounts CallLedger::counts() const {
  return CallCheckCounts{check_rounds_.load(), predicted_.load(), confirmations_.load()};
}

}  // namespace devx::dist
