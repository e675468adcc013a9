// The cross-rank call check without a check round for the calls a group keeps repeating.
//
// The call check (call_check.h) costs one small all-reduce per collective: a round trip that a
// 1 MB all_reduce on a busy host feels (10-25%). Training repeats the same collectives step after
// step, so every rank keeps the same history of the group's agreed calls and predicts the next
// one the same way: the call that followed the previous one the last two times it came. When the
// prediction is an all_reduce the engine can run blind (one tensor, a dtype and op with an
// absorbing value), every rank runs that all_reduce at once, with no check round:
// - a rank whose own call is the prediction runs it on its tensor;
// - any other rank runs it on a scratch tensor whose first element is the absorbing value (NaN
//   for SUM, AVG and PRODUCT, +inf or the largest integer for MAX, the opposite for MIN).
// The engine sees the same sizes on every rank, so it cannot abort, and the first element of the
// result, the same on every rank, holds the absorbing value whenever some rank called something
// else. Only then do the ranks confirm with the ordinary check, which tells a real value of that
// kind (all made the predicted call) from a mismatch (a DistBackendError naming every rank's call, as
// without prediction) and from a change on every rank (each then makes its own call).
//
// A predicted call's first element is read as its engine work completes. A doubted call is
// confirmed at once, from a thread of its own; every call is settled (confirmed if need be, the
// history extended) before the group issues anything else, so every rank does the same
// collectives in the same order. Only host engines run blind (gloo, which aborts on a size
// mismatch); the cuda vendor's NCCL keeps a check round per call.
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/core/ivalue.h>
#include <torch/csrc/distributed/c10d/Backend.hpp>

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <vector>

#include "distributed/call_check.h"

namespace devx::dist {

// What a rank needs to take part in a predicted all_reduce without its own tensor.
struct BlindAllreduce {
  c10::ScalarType dtype;
  int64_t numel;
  c10d::ReduceOp::RedOpType op;
};

// Waits until no thread of any ledger is settling a call. Call it without the GIL: a settling
// thread may run the Python callbacks of a work's future.
void wait_for_settle_threads();

// The blind form of an all_reduce of `tensors` with `op`, if the engine can run it blind.
std::optional<BlindAllreduce> blind_form(at::TensorList tensors, const c10d::ReduceOp& op);

// The group's agreed calls, and the prediction every rank makes from them.
class CallHistory {
 public:
  struct Prediction {
    uint64_t hash;
    BlindAllreduce form;
  };
  // The predicted next call, when it is an all_reduce that can run blind.
  std::optional<Prediction> predict() const;
  // All ranks made the call with this hash.
  void agree(uint64_t hash, std::optional<BlindAllreduce> form);
  void forget();

 private:
  struct Successor {
    uint64_t hash = 0;
    int streak = 0;
    std::optional<BlindAllreduce> form;
  };
  std::unordered_map<uint64_t, Successor> next_;
  uint64_t last_ = 0;
};

// An all_reduce issued on its prediction, until it is settled.
struct PredictedCall {
  c10::intrusive_ptr<c10d::Work> engine_work;
  at::Tensor result;  // the engine's view of the reduced tensor
  std::vector<at::Tensor> outputs;
  CallSignature signature;
  BlindAllreduce form;
  std::string what;
  std::atomic<bool> settled{false};
  std::exception_ptr error;
  c10::intrusive_ptr<c10::ivalue::Future> future;
  std::atomic<bool> future_done{false};

  PredictedCall(c10::intrusive_ptr<c10d::Work> work, at::Tensor result, std::vector<at::Tensor> outputs,
                CallSignature signature, BlindAllreduce form, std::string what);
  // The first element held the absorbing value: some rank may have called something else.
  bool doubted() const { return verdict_.load() == kDoubted; }
  void complete_future();

 private:
  friend class CallLedger;
  static constexpr int kUnread = 0, kClean = 1, kDoubted = 2;
  std::atomic<int> verdict_{kUnread};
};

struct CallCheckCounts {
  int64_t check_rounds = 0;  // calls checked by a round of their own
  int64_t predicted = 0;     // calls run on their prediction, with no round
  int64_t confirmations = 0; // rounds after a prediction some rank (or a value) put in doubt
};

// The check state of one process group: its history and the predicted call not yet settled.
// Everything but counts() needs the lock.
class CallLedger : public std::enable_shared_from_this<CallLedger> {
 public:
  CallLedger(c10::intrusive_ptr<c10d::Backend> check_engine, std::string engine_name, bool predict);

  std::unique_lock<std::mutex> lock() { return std::unique_lock<std::mutex>(mutex_); }
  // Settles the pending predicted call, so that nothing is issued before its confirmation.
  void settle_pending();
  void settle(PredictedCall& call);
  // True when this call is the prediction: the caller issues it and hands it to track().
  bool is_predicted(const CallSignature& signature) const;
  // The predicted all_reduce whose engine work is `work`, on `result` (the engine's view). Its
  // first element is read as the engine completes (later the caller may write the tensor again,
  // and every rank must decide alike), and a doubted or failed call is settled at once, off the
  // engine's thread: a rank must not wait for its next call on this group to confirm, when the
  // others may be waiting for that confirmation before their next call on another group.
  std::shared_ptr<PredictedCall> track(c10::intrusive_ptr<c10d::Work> work, at::Tensor result,
                                       std::vector<at::Tensor> outputs, CallSignature signature, BlindAllreduce form,
                                       std::string what);
  // Checks a call that was not predicted (running the prediction blind, if there was one);
  // throws the DistBackendError of a mismatch.
  void check(const CallSignature& signature, std::optional<BlindAllreduce> form);
  CallCheckCounts counts() const;

 private:
  void run_blind(const BlindAllreduce& form, const CallSignature& signature);
  void confirm(const CallSignature& signature);

  std::mutex mutex_;
  c10::intrusive_ptr<c10d::Backend> check_engine_;
  std::string engine_name_;
  bool predict_;
  CallHistory history_;
  std::shared_ptr<PredictedCall> pending_;
  std::atomic<int64_t> check_rounds_{0};
  std::atomic<int64_t> predicted_{0};
  std::atomic<int64_t> confirmations_{0};
};

}  // namespace devx::dist
