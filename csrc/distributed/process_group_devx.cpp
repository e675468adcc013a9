#include "distributed/process_group_devx.h"

#include <ATen/ops/cat.h>
#include <ATen/ops/empty.h>
#include <c10/util/Exception.h>

#include <numeric>

#include "aten/compute_scope.h"
#include "distributed/call_check.h"
#include "distributed/issue_state.h"
#include "distributed/work_devx.h"
#include "profiler/device_activity.h"
#include "runtime/device.h"
#include "runtime/sanitizer.h"
#include "runtime/stream.h"

namespace devx::dist {

namespace {

// DEVX_SIM_SANITIZE: the engine's threads read and write the devx memory (zero copy) until its
// work completes, so that is device work from the collective's first step (engine_for, before
// any view is made) until then. Handed from engine_for to wrap, on this thread.
thread_local std::shared_ptr<sanitizer::DeviceWorkHold> t_issuing;

// The engine's view of a devx tensor: a tensor of the compute device over the same bytes.
at::Tensor engine_view(const at::Tensor& t) {
  if (!t.defined() || t.device().type() != kDevx) return t;
  DevxGuard guard(t.device().index());
  // A transport's system calls on the bytes do not fault; they must find them open.
  if (C10_UNLIKELY(t_issuing)) sanitizer::open_for_system_calls(t.storage().data());
  ComputeScope scope;
  return scope.in(t);
}

std::vector<at::Tensor> engine_views(at::TensorList ts) {
  std::vector<at::Tensor> out;
  out.reserve(ts.size());
  for (const at::Tensor& t : ts) out.push_back(engine_view(t));
  return out;
}

std::vector<std::vector<at::Tensor>> engine_views(const std::vector<std::vector<at::Tensor>>& lists) {
  std::vector<std::vector<at::Tensor>> out;
  out.reserve(lists.size());
  for (const auto& l : lists) out.push_back(engine_views(l));
  return out;
}

std::vector<at::Tensor> flat(const std::vector<std::vector<at::Tensor>>& lists) {
  std::vector<at::Tensor> out;
  for (const auto& l : lists) out.insert(out.end(), l.begin(), l.end());
  return out;
}

// Work queued on a devx stream before a collective must be done before the engine reads.
void await_streams(at::TensorList ts) {
  c10::DeviceIndex done = -1;
  for (const at::Tensor& t : ts) {
    if (!t.defined() || t.device().type() != kDevx || t.device().index() == done) continue;
    done = t.device().index();
    getCurrentDevxStream(done).synchronize();
  }
}

// torch.profiler's device row for a collective, as NCCL's kernels show on CUDA: a host-timed span
// on the devx stream of its tensors, from issue to the engine's completion of the work (gloo runs
// it on its own threads, which no stream event brackets).
profiler::HostSpan begin_collective_span(const char* collective, const std::vector<at::Tensor>& outputs,
                                         const std::string& engine_name) {
  if (C10_LIKELY(!profiler::recording())) return {};
  size_t bytes = 0;
  c10::DeviceIndex device = -1;
  for (const at::Tensor& t : outputs) {
    if (!t.defined() || t.device().type() != kDevx) continue;
    if (device < 0) device = t.device().index();
    bytes += t.nbytes();
  }
  if (device < 0) return {};
  return profiler::begin_host_span(profiler::ActivityKind::kKernel, std::string(collective) + " (" + engine_name + ")",
                                   getCurrentDevxStream(device), bytes);
}

void end_collective_span(const c10::intrusive_ptr<c10d::Work>& engine_work, const profiler::HostSpan& span) {
  if (span.slot < 0) return;
  try {
    engine_work->getFuture()->addCallback([span](c10::ivalue::Future&) { profiler::end_host_span(span); });
  } catch (const std::exception&) {
    // Work without a future (gloo's send/recv) is timed to its issue only.
    profiler::end_host_span(span);
  }
}

bool is_avg(const c10d::ReduceOp& op) {
  return op.op_ == c10d::ReduceOp::AVG;
}

// gloo has no AVG: scale by 1/size, then SUM (NCCL's own AVG pre-multiplies the same way).
void scale_for_avg(at::TensorList ts, int size) {
  for (const at::Tensor& t : ts) {
    TORCH_CHECK_VALUE(at::isFloatingType(t.scalar_type()) || at::isComplexType(t.scalar_type()),
                      "devx: ReduceOp.AVG needs floating-point or complex tensors, got ", t.scalar_type());
  }
  for (const at::Tensor& t : ts) t.mul_(1.0 / size);
  await_streams(ts);
}

std::vector<at::Tensor> scaled_copies(at::TensorList ts, int size) {
  std::vector<at::Tensor> out;
  for (const at::Tensor& t : ts) out.push_back(t.clone());
  scale_for_avg(out, size);
  return out;
}

std::string describe(const char* collective, const std::vector<at::Tensor>& outputs) {
  for (const at::Tensor& t : outputs) {
    if (t.defined()) return std::string(collective) + " on " + t.device().str();
  }
  return collective;
}

}  // namespace

ProcessGroupDevx::ProcessGroupDevx(c10::intrusive_ptr<c10d::Backend> engine,
                                   c10::intrusive_ptr<c10d::Backend> host_engine, std::string engine_name,
                                   bool check_calls)
    : c10d::Backend(engine->getRank(), engine->getSize()),
      engine_(std::move(engine)),
      host_engine_(std::move(host_engine)),
      engine_name_(std::move(engine_name)) {
  TORCH_CHECK(host_engine_->getRank() == rank_ && host_engine_->getSize() == size_,
              "devx process group: the host engine's rank/size differ from the device engine's");
  if (check_calls && size_ > 1) {
    // Only an engine that runs on the host runs predicted calls blind: one on a device (NCCL)
    // would make the host wait for every all_reduce before the next call.
    ledger_ = std::make_shared<CallLedger>(host_engine_, engine_name_, engine_ == host_engine_);
  }
  init();
}

void ProcessGroupDevx::setTimeout(std::chrono::milliseconds timeout) {
  engine_->setTimeout(timeout);
  if (host_engine_ != engine_) host_engine_->setTimeout(timeout);
}

c10d::Backend& ProcessGroupDevx::engine_for(const char* collective, std::initializer_list<at::TensorList> groups) {
  bool any_devx = false, any_cpu = false;
  for (at::TensorList ts : groups) {
    for (const at::Tensor& t : ts) {
      TORCH_CHECK_VALUE(t.defined(), "devx: ", collective, " got an undefined tensor");
      const c10::DeviceType type = t.device().type();
      TORCH_CHECK_VALUE(type == kDevx || type == c10::kCPU, "devx: ", collective,
                        " takes devx or CPU tensors, got one on ", t.device());
      any_devx |= type == kDevx;
      any_cpu |= type == c10::kCPU;
    }
  }
  TORCH_CHECK_VALUE(!(any_devx && any_cpu), "devx: ", collective,
                    " mixes devx and CPU tensors; give it tensors of one kind");
  // Replaces (and so releases) one left by a collective that failed before its wrap.
  t_issuing = sanitizer::enabled() && any_devx ? std::make_shared<sanitizer::DeviceWorkHold>() : nullptr;
  for (at::TensorList ts : groups) await_streams(ts);
  return any_cpu ? *host_engine_ : *engine_;
}

void ProcessGroupDevx::check(const CallSignature& signature, std::optional<BlindAllreduce> form) {
  if (!ledger_) return;
  auto lock = ledger_->lock();
  ledger_->settle_pending();
  ledger_->check(signature, form);
}

void ProcessGroupDevx::check_pairs(const CallSignature& signature, const std::vector<int64_t>& sends,
                                   const std::vector<int64_t>& receives) {
  if (!ledger_) return;
  auto lock = ledger_->lock();
  ledger_->settle_pending();
  ledger_->check(signature, std::nullopt);
  check_pair_sizes(*host_engine_, signature, sends, receives, engine_name_);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupDevx::wrap(const std::function<c10::intrusive_ptr<c10d::Work>()>& issue,
                                                      std::vector<at::Tensor> outputs, c10d::OpType type,
                                                      const char* collective) {
  std::shared_ptr<sanitizer::DeviceWorkHold> hold = std::move(t_issuing);
  const profiler::HostSpan span = begin_collective_span(collective, outputs, engine_name_);
  c10::intrusive_ptr<c10d::Work> engine_work;
  {
    WithoutThreadPythonObjects without_python;
    engine_work = issue();
  }
  end_collective_span(engine_work, span);
  std::string what = describe(collective, outputs);
  return c10::make_intrusive<WorkDevx>(std::move(engine_work), std::move(outputs), rank_, type, std::move(what),
                                       engine_name_, std::move(hold));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupDevx::broadcast(std::vector<at::Tensor>& tensors,
                                                           const c10d::BroadcastOptions& opts) {
  c10d::Backend& engine = engine_for("broadcast", {tensors});
  check(CallSignature("broadcast").tensors(tensors).value("src", opts.rootRank));
  auto views = engine_views(tensors);
  return wrap([&] { return engine.broadcast(views, opts); }, tensors, c10d::OpType::BROADCAST, "broadcast");
}

c10::intrusive_ptr<c10d::Work> ProcessGroupDevx::allreduce(std::vector<at::Tensor>& tensors,
                                                           const c10d::AllreduceOptions& opts) {
  c10d::Backend& engine = engine_for("all_reduce", {tensors});
  CallSignature signature("all_reduce");
  signature.tensors(tensors).op(opts.reduceOp);
  c10d::AllreduceOptions o = opts;
  if (is_avg(opts.reduceOp)) o.reduceOp = c10d::ReduceOp::SUM;
  std::unique_lock<std::mutex> lock;
  bool predicted = false;
  if (ledger_) {
    lock = ledger_->lock();
    ledger_->settle_pending();
    predicted = ledger_->is_predicted(signature);
    if (!predicted) {
      ledger_->check(signature, blind_form(tensors, opts.reduceOp));
      lock.unlock();
    }
  }
  if (is_avg(opts.reduceOp)) scale_for_avg(tensors, size_);
  auto views = engine_views(tensors);
  if (!predicted) {
    return wrap([&] { return engine.allreduce(views, o); }, tensors, c10d::OpType::ALLREDUCE, "all_reduce");
  }
  // Issued under the ledger's lock, so that it is tracked before anything else is issued.
  std::shared_ptr<sanitizer::DeviceWorkHold> hold = std::move(t_issuing);
  const profiler::HostSpan span = begin_collective_span("all_reduce", tensors, engine_name_);
  c10::intrusive_ptr<c10d::Work> engine_work;
  {
    WithoutThreadPythonObjects without_python;
    engine_work = engine.allreduce(views, o);
  }
  end_collective_span(engine_work, span);
  std::string what = describe("all_reduce", tensors);
  auto call = ledger_->track(engine_work, views[0], tensors, std::move(signature), *blind_form(tensors, opts.reduceOp),
                             what);
  return c10::make_intrusive<WorkDevx>(std::move(engine_work), tensors, rank_, c10d::OpType::ALLREDUCE,
                                       std::move(what), engine_name_, std::move(hold), std::move(call), ledger_);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupDevx::allreduce_coalesced(std::vector<at::Tensor>& tensors,
                                                                     const c10d::AllreduceCoalescedOptions& opts) {
  c10d::Backend& engine = engine_for("all_reduce_coalesced", {tensors});
  check(CallSignature("all_reduce_coalesced").tensors(tensors).op(opts.reduceOp));
  c10d::AllreduceCoalescedOptions o = opts;
  if (is_avg(opts.reduceOp)) {
    scale_for_avg(tensors, size_);
    o.reduceOp = c10d::ReduceOp::SUM;
  }
  auto views = engine_views(tensors);
  return wrap([&] { return engine.allreduce_coalesced(views, o); }, tensors, c10d::OpType::ALLREDUCE_COALESCED,
              "all_reduce_coalesced");
}

c10::intrusive_ptr<c10d::Work> ProcessGroupDevx::reduce(std::vector<at::Tensor>& tensors,
                                                        const c10d::ReduceOptions& opts) {
  c10d::Backend& engine = engine_for("reduce", {tensors});
  check(CallSignature("reduce").tensors(tensors).op(opts.reduceOp).value("dst", opts.rootRank));
  c10d::ReduceOptions o = opts;
  if (is_avg(opts.reduceOp)) {
    scale_for_avg(tensors, size_);
    o.reduceOp = c10d::ReduceOp::SUM;
  }
  auto views = engine_views(tensors);
  return wrap([&] { return engine.reduce(views, o); }, tensors, c10d::OpType::REDUCE, "reduce");
}

c10::intrusive_ptr<c10d::Work> ProcessGroupDevx::allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                                           std::vector<at::Tensor>& inputs,
                                                           const c10d::AllgatherOptions& opts) {
  auto out_flat = flat(outputs);
  c10d::Backend& engine = engine_for("all_gather", {out_flat, inputs});
  // Every rank passes the same outputs, its own input shaped as its own output; ranks may
  // contribute different sizes (outputs[0][i] is rank i's), as NCCL allows.
  const bool one_list = inputs.size() == 1 && outputs.size() == 1 && outputs[0].size() == static_cast<size_t>(size_);
  bool uneven = false;
  if (one_list) {
    for (const at::Tensor& t : outputs[0]) uneven |= t.sizes() != outputs[0][0].sizes();
  }
  const bool input_is_own_output = !one_list || (inputs[0].sizes() == outputs[0][rank_].sizes() &&
                                                 inputs[0].scalar_type() == outputs[0][rank_].scalar_type());
  check(CallSignature("all_gather").tensors(out_flat).value("input_as_own_output", input_is_own_output));
  if (uneven) {
    TORCH_CHECK_VALUE(input_is_own_output, "devx: all_gather with per-rank sizes: rank ", rank_, "'s input is ",
                      inputs[0].scalar_type(), inputs[0].sizes(), " but its own output is ",
                      outputs[0][rank_].scalar_type(), outputs[0][rank_].sizes());
    return allgather_uneven(engine, outputs[0], inputs[0], opts);
  }
  auto out_views = engine_views(outputs);
  auto in_views = engine_views(inputs);
  return wrap([&] { return engine.allgather(out_views, in_views, opts); }, out_flat, c10d::OpType::ALLGATHER, "all_gather");
}

c10::intrusive_ptr<c10d::Work> ProcessGroupDevx::allgather_uneven(c10d::Backend& engine,
                                                                  std::vector<at::Tensor>& outputs,
                                                                  const at::Tensor& input,
                                                                  const c10d::AllgatherOptions& opts) {
  // gloo gathers only equal sizes: each rank broadcasts its part into everyone's output for it.
  // Complete when it returns (an async_op caller gets finished work).
  outputs[rank_].copy_(input);
  await_streams(outputs);
  auto out_views = engine_views(outputs);
  const std::string what = describe("all_gather", outputs);
  return wrap([&] {
    std::vector<c10::intrusive_ptr<c10d::Work>> works;
    for (int root = 0; root < size_; ++root) {
      std::vector<at::Tensor> part{out_views[root]};
      c10d::BroadcastOptions o;
      o.rootRank = root;
      o.timeout = opts.timeout;
      works.push_back(engine.broadcast(part, o));
    }
    try {
      for (const auto& w : works) w->wait();
    } catch (...) {
      rethrow_engine_error(what, engine_name_);
    }
    return works.back();
  }, outputs, c10d::OpType::ALLGATHER, "all_gather");
}

c10::intrusive_ptr<c10d::Work> ProcessGroupDevx::_allgather_base(at::Tensor& output, at::Tensor& input,
                                                                 const c10d::AllgatherOptions& opts) {
  c10d::Backend& engine = engine_for("all_gather_into_tensor", {output, input});
  check(CallSignature("all_gather_into_tensor").tensor(output).tensor(input));
  // As NCCL: the output holds size × the input's elements, whatever its shape (SyncBatchNorm
  // gathers (2C + 1) values into a (1, size × (2C + 1)) tensor); gloo splits its first dimension,
  // so it gets both flat.
  TORCH_CHECK_VALUE(output.numel() == input.numel() * size_, "devx: all_gather_into_tensor: the output has ",
                    output.numel(), " elements, not ", size_, " × the input's ", input.numel());
  const bool flat = output.is_contiguous() && input.is_contiguous();
  at::Tensor out_view = engine_view(flat ? output.view({-1}) : output);
  at::Tensor in_view = engine_view(flat ? input.view({-1}) : input);
  return wrap([&] { return engine._allgather_base(out_view, in_view, opts); }, {output}, c10d::OpType::_ALLGATHER_BASE,
              "all_gather_into_tensor");
}

c10::intrusive_ptr<c10d::Work> ProcessGroupDevx::allgather_coalesced(std::vector<std::vector<at::Tensor>>& outputs,
                                                                     std::vector<at::Tensor>& inputs,
                                                                     const c10d::AllgatherOptions& opts) {
  auto out_flat = flat(outputs);
  c10d::Backend& engine = engine_for("all_gather_coalesced", {out_flat, inputs});
  check(CallSignature("all_gather_coalesced").tensors(inputs));
  auto out_views = engine_views(outputs);
  auto in_views = engine_views(inputs);
  return wrap([&] { return engine.allgather_coalesced(out_views, in_views, opts); }, out_flat, c10d::OpType::ALLGATHER_COALESCED,
              "all_gather_coalesced");
}

c10::intrusive_ptr<c10d::Work> ProcessGroupDevx::allgather_into_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                                                 std::vector<at::Tensor>& inputs,
                                                                                 const c10d::AllgatherOptions& opts) {
  c10d::Backend& engine = engine_for("all_gather_into_tensor_coalesced", {outputs, inputs});
  check(CallSignature("all_gather_into_tensor_coalesced").tensors(outputs).tensors(inputs));
  auto out_views = engine_views(outputs);
  auto in_views = engine_views(inputs);
  return wrap([&] { return engine.allgather_into_tensor_coalesced(out_views, in_views, opts); }, outputs, c10d::OpType::COALESCED,
              "all_gather_into_tensor_coalesced");
}

c10::intrusive_ptr<c10d::Work> ProcessGroupDevx::gather(std::vector<std::vector<at::Tensor>>& outputs,
                                                        std::vector<at::Tensor>& inputs,
                                                        const c10d::GatherOptions& opts) {
  auto out_flat = flat(outputs);
  c10d::Backend& engine = engine_for("gather", {out_flat, inputs});
  check(CallSignature("gather").tensors(inputs).value("dst", opts.rootRank));
  auto out_views = engine_views(outputs);
  auto in_views = engine_views(inputs);
  return wrap([&] { return engine.gather(out_views, in_views, opts); }, out_flat, c10d::OpType::GATHER, "gather");
}

c10::intrusive_ptr<c10d::Work> ProcessGroupDevx::scatter(std::vector<at::Tensor>& outputs,
                                                         std::vector<std::vector<at::Tensor>>& inputs,
                                                         const c10d::ScatterOptions& opts) {
  auto in_flat = flat(inputs);
  c10d::Backend& engine = engine_for("scatter", {outputs, in_flat});
  check(CallSignature("scatter").tensors(outputs).value("src", opts.rootRank));
  auto out_views = engine_views(outputs);
  auto in_views = engine_views(inputs);
  return wrap([&] { return engine.scatter(out_views, in_views, opts); }, outputs, c10d::OpType::SCATTER, "scatter");
}

c10::intrusive_ptr<c10d::Work> ProcessGroupDevx::reduce_scatter(std::vector<at::Tensor>& outputs,
                                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                                const c10d::ReduceScatterOptions& opts) {
  auto in_flat = flat(inputs);
  c10d::Backend& engine = engine_for("reduce_scatter", {outputs, in_flat});
  check(CallSignature("reduce_scatter").tensors(outputs).tensors(in_flat).op(opts.reduceOp));
  c10d::ReduceScatterOptions o = opts;
  std::vector<std::vector<at::Tensor>> in_views;
  if (is_avg(opts.reduceOp)) {
    for (const auto& l : inputs) in_views.push_back(engine_views(scaled_copies(l, size_)));
    o.reduceOp = c10d::ReduceOp::SUM;
  } else {
    in_views = engine_views(inputs);
  }
  auto out_views = engine_views(outputs);
  return wrap([&] { return engine.reduce_scatter(out_views, in_views, o); }, outputs, c10d::OpType::REDUCE_SCATTER,
              "reduce_scatter");
}

c10::intrusive_ptr<c10d::Work> ProcessGroupDevx::_reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                                      const c10d::ReduceScatterOptions& opts) {
  c10d::Backend& engine = engine_for("reduce_scatter_tensor", {output, input});
  check(CallSignature("reduce_scatter_tensor").tensor(output).tensor(input).op(opts.reduceOp));
  c10d::ReduceScatterOptions o = opts;
  at::Tensor in_view;
  if (is_avg(opts.reduceOp)) {
    in_view = engine_view(scaled_copies({input}, size_)[0]);
    o.reduceOp = c10d::ReduceOp::SUM;
  } else {
    in_view = engine_view(input);
  }
  at::Tensor out_view = engine_view(output);
  return wrap([&] { return engine._reduce_scatter_base(out_view, in_view, o); }, {output}, c10d::OpType::_REDUCE_SCATTER_BASE,
              "reduce_scatter_tensor");
}

c10::intrusive_ptr<c10d::Work> ProcessGroupDevx::reduce_scatter_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs, const c10d::ReduceScatterOptions& opts) {
  c10d::Backend& engine = engine_for("reduce_scatter_tensor_coalesced", {outputs, inputs});
  check(CallSignature("reduce_scatter_tensor_coalesced").tensors(outputs).tensors(inputs).op(opts.reduceOp));
  c10d::ReduceScatterOptions o = opts;
  std::vector<at::Tensor> in_views;
  if (is_avg(opts.reduceOp)) {
    in_views = engine_views(scaled_copies(inputs, size_));
    o.reduceOp = c10d::ReduceOp::SUM;
  } else {
    in_views = engine_views(inputs);
  }
  auto out_views = engine_views(outputs);
  // COALESCED, as all_gather_into_tensor_coalesced: torch before 2.13 has no
  // REDUCE_SCATTER_TENSOR_COALESCED, and the name carries the op.
  return wrap([&] { return engine.reduce_scatter_tensor_coalesced(out_views, in_views, o); }, outputs,
              c10d::OpType::COALESCED, "reduce_scatter_tensor_coalesced");
}

c10::intrusive_ptr<c10d::Work> ProcessGroupDevx::alltoall_base(at::Tensor& output, at::Tensor& input,
                                                               std::vector<int64_t>& output_splits,
                                                               std::vector<int64_t>& input_splits,
                                                               const c10d::AllToAllOptions& opts) {
  c10d::Backend& engine = engine_for("all_to_all_single", {output, input});
  // With explicit splits the sizes legitimately differ per rank; what must agree is the dtype
  // and the row shape (and, checked by the engine, each rank's splits against its tensors).
  CallSignature signature("all_to_all_single");
  if (output_splits.empty() && input_splits.empty()) {
    signature.tensor(output).tensor(input);
  } else {
    signature.rows_of(output).rows_of(input);
  }
  check(signature);
  at::Tensor out_view = engine_view(output);
  at::Tensor in_view = engine_view(input);
  return wrap([&] { return engine.alltoall_base(out_view, in_view, output_splits, input_splits, opts); }, {output},
              c10d::OpType::ALLTOALL_BASE, "all_to_all_single");
}

c10::intrusive_ptr<c10d::Work> ProcessGroupDevx::alltoall(std::vector<at::Tensor>& outputs,
                                                          std::vector<at::Tensor>& inputs,
                                                          const c10d::AllToAllOptions& opts) {
  c10d::Backend& engine = engine_for("all_to_all", {outputs, inputs});
  TORCH_CHECK_VALUE(inputs.size() == static_cast<size_t>(size_) && outputs.size() == inputs.size(), "devx: all_to_all "
                    "takes one input and one output tensor per rank (", size_, "), got ", inputs.size(), " and ",
                    outputs.size());
  const c10::ScalarType dtype = inputs[0].scalar_type();
  for (const at::TensorList ts : {at::TensorList(inputs), at::TensorList(outputs)}) {
    for (const at::Tensor& t : ts) {
      TORCH_CHECK_VALUE(t.scalar_type() == dtype, "devx: all_to_all needs tensors of one dtype, got ", dtype, " and ",
                        t.scalar_type());
    }
  }
  // Every pair of ranks may exchange its own number of elements, as NCCL allows: that is checked
  // pair by pair, and the bytes travel as one all_to_all_single of the flattened tensors.
  CallSignature signature("all_to_all");
  signature.value("tensors", static_cast<int64_t>(inputs.size())).value("dtype", static_cast<int64_t>(dtype));
  std::vector<int64_t> sends, receives;
  for (int r = 0; r < size_; ++r) {
    sends.push_back(inputs[r].numel());
    receives.push_back(outputs[r].numel());
  }
  check_pairs(signature, sends, receives);
  std::vector<at::Tensor> flat_inputs;
  for (const at::Tensor& t : inputs) flat_inputs.push_back(t.reshape({-1}));
  at::Tensor send = at::cat(flat_inputs);
  at::Tensor receive = at::empty({std::accumulate(receives.begin(), receives.end(), int64_t{0})}, send.options());
  await_streams({send, receive});
  at::Tensor send_view = engine_view(send);
  at::Tensor receive_view = engine_view(receive);
  const std::string what = describe("all_to_all", outputs);
  c10d::AllToAllOptions o = opts;
  return wrap([&] {
    // Copies: an engine may take its split vectors over (gloo moves them into its work).
    std::vector<int64_t> receive_splits = receives, send_splits = sends;
    c10::intrusive_ptr<c10d::Work> work = engine.alltoall_base(receive_view, send_view, receive_splits, send_splits, o);
    // Complete when it returns (an async_op caller gets finished work): the outputs are filled
    // from the received buffer once the engine is done with it.
    try {
      work->wait();
    } catch (...) {
      rethrow_engine_error(what, engine_name_);
    }
    int64_t offset = 0;
    for (int r = 0; r < size_; ++r) {
      outputs[r].copy_(receive.narrow(0, offset, receives[r]).view(outputs[r].sizes()));
      offset += receives[r];
    }
    return work;
  }, outputs, c10d::OpType::ALLTOALL, "all_to_all");
}

c10::intrusive_ptr<c10d::Work> ProcessGroupDevx::send(std::vector<at::Tensor>& tensors, int dst_rank, int tag) {
  c10d::Backend& engine = engine_for("send", {tensors});
  auto views = engine_views(tensors);
  return wrap([&] { return engine.send(views, dst_rank, tag); }, tensors, c10d::OpType::SEND, "send");
}

c10::intrusive_ptr<c10d::Work> ProcessGroupDevx::recv(std::vector<at::Tensor>& tensors, int src_rank, int tag) {
  c10d::Backend& engine = engine_for("recv", {tensors});
  auto views = engine_views(tensors);
  return wrap([&] { return engine.recv(views, src_rank, tag); }, tensors, c10d::OpType::RECV, "recv");
}

c10::intrusive_ptr<c10d::Work> ProcessGroupDevx::recvAnysource(std::vector<at::Tensor>& tensors, int tag) {
  c10d::Backend& engine = engine_for("recv", {tensors});
  auto views = engine_views(tensors);
  return wrap([&] { return engine.recvAnysource(views, tag); }, tensors, c10d::OpType::RECVANYSOURCE, "recv");
}

c10::intrusive_ptr<c10d::Work> ProcessGroupDevx::barrier(const c10d::BarrierOptions& opts) {
  check(CallSignature("barrier"));
  // Everything issued on the current devx stream comes before the barrier, as with NCCL.
  getCurrentDevxStream(current_device()).synchronize();
  return wrap([&] { return host_engine_->barrier(opts); }, {}, c10d::OpType::BARRIER, "barrier");
}

void ProcessGroupDevx::monitoredBarrier(const c10d::BarrierOptions& opts, bool wait_all_ranks) {
  WithoutThreadPythonObjects without_python;
  host_engine_->monitoredBarrier(opts, wait_all_ranks);
}

void ProcessGroupDevx::setSequenceNumberForGroup() {
  engine_->setSequenceNumberForGroup();
}

uint64_t ProcessGroupDevx::getSequenceNumberForGroup() {
  return engine_->getSequenceNumberForGroup();
}

void ProcessGroupDevx::abort() {
  engine_->abort();
  if (host_engine_ != engine_) host_engine_->abort();
}

void ProcessGroupDevx::shutdown() {
  engine_->shutdown();
  if (host_engine_ != engine_) host_engine_->shutdown();
  // torch.distributed calls this without the GIL; a call still being settled may need it.
  if (ledger_) wait_for_settle_threads();
}

}  // namespace devx::dist
