// The work object of a devx collective: the engine's work on the aliases, answered in devx terms
// (its result and future hold the caller's devx tensors) and with errors that say which devx
// collective failed in which engine.
#pragma once

#include <torch/csrc/distributed/c10d/Work.hpp>

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "distributed/call_ledger.h"
#include "runtime/sanitizer.h"

namespace devx::dist {

class WorkDevx final : public c10d::Work {
 public:
  // `what` names the call ("all_reduce on devx:0"); `engine_name` the engine ("gloo"); `hold`
  // (DEVX_SIM_SANITIZE) is released once the engine has finished with the memory.
  // `predicted` (with its group's `ledger`): an all_reduce issued on its prediction, which is
  // done once it is settled (call_ledger.h).
  WorkDevx(c10::intrusive_ptr<c10d::Work> engine_work, std::vector<at::Tensor> outputs, int rank,
           c10d::OpType type, std::string what, std::string engine_name,
           std::shared_ptr<sanitizer::DeviceWorkHold> hold = nullptr,
           std::shared_ptr<PredictedCall> predicted = nullptr, std::shared_ptr<CallLedger> ledger = nullptr);

  bool isCompleted() override;
  bool isSuccess() const override;
  std::exception_ptr exception() const override;
  int sourceRank() const override;
  std::vector<at::Tensor> result() override;
  void synchronize() override;
  bool wait(std::chrono::milliseconds timeout = kNoTimeout) override;
  void abort() override;
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;

 private:
  c10::intrusive_ptr<c10d::Work> engine_work_;
  std::vector<at::Tensor> outputs_;
  std::string what_;
  std::string engine_name_;
  std::mutex future_mutex_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
  std::shared_ptr<sanitizer::DeviceWorkHold> hold_;
  std::shared_ptr<PredictedCall> predicted_;
  std::shared_ptr<CallLedger> ledger_;

  // Settles a predicted call; throws its error.
  void settle();
};

// Rethrows the exception in flight as a DistBackendError naming the devx call and the engine.
[[noreturn]] void rethrow_engine_error(const std::string& what, const std::string& engine_name);

}  // namespace devx::dist
