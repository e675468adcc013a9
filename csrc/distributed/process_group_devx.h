// The devx process group (DIPU's DICL in spirit): a c10d::Backend for devx tensors that moves
// their bytes through an existing engine — gloo on cpu_sim, NCCL on the cuda vendor — by handing
// the engine aliases of devx memory (CPU tensors on cpu_sim, CUDA tensors on cuda; no copies).
//
// Ordering: before the engine sees a devx tensor, the host waits for the current devx stream of
// its device, so the engine reads finished values (free in cpu_sim, whose ops complete as they
// are issued). wait() and futures return once the engine is done with the bytes (WorkDevx).
// Lifetime: every alias holds a reference on the devx storage it views, and the engine holds its
// aliases until its work is done, so a devx tensor freed mid-collective keeps its memory until
// then — what record_stream buys a stream-ordered allocator.
// Checking: every collective is checked across ranks before the engine can see mismatched
// calls, by a round of its own or, for a repeated all_reduce, by its prediction (call_ledger.h).
#pragma once

#include <functional>
#include <memory>
#include <optional>

#include <torch/csrc/distributed/c10d/Backend.hpp>

#include <string>
#include <vector>

#include "distributed/call_ledger.h"

namespace devx::dist {

class ProcessGroupDevx final : public c10d::Backend {
 public:
  // `engine` runs the collectives of devx tensors (on their aliases), `host_engine` those of CPU
  // tensors (the same engine on cpu_sim). `check_calls` turns on the cross-rank call check.
  ProcessGroupDevx(c10::intrusive_ptr<c10d::Backend> engine, c10::intrusive_ptr<c10d::Backend> host_engine,
                   std::string engine_name, bool check_calls);

  const std::string getBackendName() const override { return "devx"; }
  const std::string& engine_name() const { return engine_name_; }
  CallCheckCounts call_check_counts() const { return ledger_ ? ledger_->counts() : CallCheckCounts{}; }
  void setTimeout(std::chrono::milliseconds timeout) override;
  bool supportsCoalescing() const override { return false; }

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(std::vector<at::Tensor>& tensors,
                                                     const c10d::AllreduceCoalescedOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors, const c10d::ReduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(std::vector<std::vector<at::Tensor>>& outputs,
                                                     std::vector<at::Tensor>& inputs,
                                                     const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                                 std::vector<at::Tensor>& inputs,
                                                                 const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs,
                                        std::vector<at::Tensor>& inputs, const c10d::GatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs,
                                         std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                      const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                                 std::vector<at::Tensor>& inputs,
                                                                 const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                               std::vector<int64_t>& output_splits,
                                               std::vector<int64_t>& input_splits,
                                               const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dst_rank, int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int src_rank, int tag) override;
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors, int tag) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override;
  void monitoredBarrier(const c10d::BarrierOptions& opts, bool wait_all_ranks) override;
  void setSequenceNumberForGroup() override;
  uint64_t getSequenceNumberForGroup() override;
  void abort() override;
  void shutdown() override;

 private:
  // The engine for these tensors (devx or CPU, never mixed) after waiting for their streams.
  c10d::Backend& engine_for(const char* collective, std::initializer_list<at::TensorList> groups);
  // The cross-rank call check of a call that is not issued on its prediction (call_ledger.h).
  void check(const CallSignature& signature, std::optional<BlindAllreduce> form = std::nullopt);
  // The same, then the per-pair sizes of an exchange (call_check.h, check_pair_sizes).
  void check_pairs(const CallSignature& signature, const std::vector<int64_t>& sends,
                   const std::vector<int64_t>& receives);
  // all_gather whose ranks contribute different sizes (outputs[i] is rank i's part).
  c10::intrusive_ptr<c10d::Work> allgather_uneven(c10d::Backend& engine, std::vector<at::Tensor>& outputs,
                                                  const at::Tensor& input, const c10d::AllgatherOptions& opts);
  // The devx work of the engine work that `issue` starts.
  c10::intrusive_ptr<c10d::Work> wrap(const std::function<c10::intrusive_ptr<c10d::Work>()>& issue,
                                      std::vector<at::Tensor> outputs, c10d::OpType type, const char* collective);

  c10::intrusive_ptr<c10d::Backend> engine_;
  c10::intrusive_ptr<c10d::Backend> host_engine_;
  std::string engine_name_;
  // Null when calls are not checked.
  std::shared_ptr<CallLedger> ledger_;
};

}  // namespace devx::dist
