#include "aten/async_ops.h"

#include <ATen/EmptyTensor.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/core/enum_tag.h>
#include <c10/core/StorageImpl.h>
#include <c10/core/TensorImpl.h>
#include <c10/util/SmallVector.h>

#include <cstring>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <unordered_map>

#include "aten/boxed_compute.h"
#include "aten/op_registry.h"
#include "aten/stack_util.h"
#include "aten/vendor_call.h"
#include "profiler/device_activity.h"
#include "runtime/allocator.h"
#include "runtime/device.h"
#include "runtime/generator.h"
#include "runtime/memcpy.h"
#include "runtime/python_hooks.h"
#include "runtime/sanitizer.h"
#include "runtime/stream.h"
#include "runtime/sync_debug.h"

namespace devx::async {

thread_local int t_inline_depth = 0;

namespace {

const c10::DispatchKeySet kDevxKeys(c10::DispatchKey::PrivateUse1);

struct InlineScope {
  InlineScope() { ++t_inline_depth; }
  ~InlineScope() { --t_inline_depth; }
  InlineScope(const InlineScope&) = delete;
  InlineScope& operator=(const InlineScope&) = delete;
};

// Running a stream's work: ops run here, on this device, and what they allocate belongs to this
// stream. The thread may be a host waiting for the stream (cpu_sim's synchronize runs queued work
// on the waiting thread), so its device and current stream are restored afterwards.
struct WorkerScope : InlineScope {
  explicit WorkerScope(const DevxStream& stream)
      : device_(current_device()), stream_(getCurrentDevxStream(stream.device_index())) {
    set_device(stream.device_index());
    setCurrentDevxStream(stream);
  }
  ~WorkerScope() {
    setCurrentDevxStream(stream_);
    set_device(device_);
  }
  WorkerScope(const WorkerScope&) = delete;
  WorkerScope& operator=(const WorkerScope&) = delete;

 private:
  c10::DeviceIndex device_;
  DevxStream stream_;
};

// kRunNow: on the calling thread, without waiting (views); kInline: the same after waiting for the stream.
enum class Kind { kRunNow, kInline, kIssue };

struct Plan {
  Kind kind = Kind::kInline;
  // Bit i: the op writes argument i (argument_written, asked once instead of per call).
  uint64_t written = 0;
  // For ops whose meta kernel agrees with the compute kernel only for some arguments: whether
  // these arguments (at stack[first]) may be issued.
  bool (*issuable)(const torch::jit::Stack& stack, size_t first) = nullptr;
  bool draws = false;  // draws random numbers
  // The results' shapes depend on the values of floating-point arguments (arange's bounds).
  bool shape_from_values = false;
};

bool is_tensor_or_list(const c10::TypePtr& type) {
  if (type->kind() == c10::TypeKind::TensorType) return true;
  auto list = type->cast<c10::ListType>();
  return list && list->getElementType()->kind() == c10::TypeKind::TensorType;
}

// Whether devx runs the op with a compute-device kernel (the CPU fallback synchronises by itself
// and must not run on a stream's worker).
bool runs_natively(const c10::OperatorHandle& op) {
  const int index = op_index(op.operator_name());
  if (index >= 0) return kernel_source(index) != KernelSource::kFallback;
  return is_long_tail_op(op.operator_name());
}

bool full_precision_input(const torch::jit::Stack& stack, size_t first) {
  const c10::IValue& input = stack[first];
  if (!input.isTensor()) return false;
  const c10::ScalarType dtype = input.toTensor().scalar_type();
  return dtype == c10::kFloat || dtype == c10::kDouble;
}

// native_batch_norm / _native_batch_norm_legit(input, weight, bias, running_mean, running_var,
// training, ...): outside training the CPU kernel's saved statistics are empty, the meta kernel's
// not; the CPU kernel's statistics of reduced-precision inputs follow the parameters' dtype, the
// meta kernel's are float.
bool batch_norm_training(const torch::jit::Stack& stack, size_t first) {
  const c10::IValue& training = stack[first + 5];
  return training.isBool() && training.toBool() && full_precision_input(stack, first);
}

// native_layer_norm(input, normalized_shape, weight, bias, eps): the CPU kernel's statistics of
// reduced-precision inputs are float, the meta kernel's of the input's dtype.
bool layer_norm_full_precision(const torch::jit::Stack& stack, size_t first) {
  return full_precision_input(stack, first);
}

Plan make_plan(const c10::OperatorHandle& op) {
  Plan plan;
  const c10::FunctionSchema& schema = op.schema();
  // Views, and in-place changes of a view (t_, unsqueeze_), touch no data.
  bool now = op.hasTag(at::Tag::inplace_view);
  for (const c10::Argument& ret : schema.returns()) now = now || (ret.alias_info() && !ret.alias_info()->isWrite());
  if (now) {
    plan.kind = Kind::kRunNow;
    return plan;
  }
  // Ops that only look at their arguments' metadata.
  if (op.operator_name().name == "aten::_fused_sdp_choice") {
    plan.kind = Kind::kRunNow;
    return plan;
  }
  // Random ops draw from the generator when their kernel runs, on a stream's worker: issuing
  // them keeps the draws in host order (generator.h, note_issued_draw). Some take no generator
  // argument (native_dropout), so the tag decides too.
  plan.draws = op.hasTag(at::Tag::nondeterministic_seeded);
  for (const c10::Argument& arg : schema.arguments()) plan.draws = plan.draws || is_generator_arg(arg);
  if (op.hasTag(at::Tag::dynamic_output_shape) || op.hasTag(at::Tag::data_dependent_output)) return plan;
  // Ops whose meta kernel promises other results than the CPU kernel makes: never
  // (_embedding_bag's auxiliary results; the CPU's LAPACK kernels give linalg_eig's eigenvectors
  // and _linalg_svd's Vh column-major, their meta kernels row-major), or for some arguments only
  // (see the predicates).
  static const char* const kMetaDisagrees[] = {"aten::_native_batch_norm_legit_no_training", "aten::_embedding_bag",
                                               "aten::_embedding_bag_forward_only", "aten::linalg_eig",
                                               "aten::_linalg_svd"};
  for (const char* name : kMetaDisagrees) {
    if (op.operator_name().name == name) return plan;
  }
  const std::string& name = op.operator_name().name;
  if (name == "aten::native_batch_norm" || name == "aten::_native_batch_norm_legit") {
    plan.issuable = &batch_norm_training;
  } else if (name == "aten::native_layer_norm") {
    plan.issuable = &layer_norm_full_precision;
  }
  if (!runs_natively(op) || !op.hasComputedKernelForDispatchKey(c10::DispatchKey::Meta)) return plan;
  for (const c10::Argument& ret : schema.returns()) {
    if (!is_tensor_or_list(ret.type())) return plan;
  }
  if (schema.arguments().size() > 64) return plan;
  plan.shape_from_values = name == "aten::arange" || name == "aten::range" || name == "aten::linspace" ||
                           name == "aten::logspace";
  for (size_t i = 0; i < schema.arguments().size(); ++i) {
    if (argument_written(schema, i)) plan.written |= uint64_t{1} << i;
  }
  plan.kind = Kind::kIssue;
  return plan;
}

// Each op's plan is made once per process; each thread remembers the plans it has used, so that
// issuing an op takes no lock (the host thread and the stream workers issue concurrently).
const Plan& plan_for(const c10::OperatorHandle& op) {
  const c10::FunctionSchema* schema = &op.schema();
  thread_local std::unordered_map<const c10::FunctionSchema*, const Plan*> seen;
  auto hit = seen.find(schema);
  if (hit != seen.end()) return *hit->second;
  static std::mutex mutex;
  static std::unordered_map<const c10::FunctionSchema*, Plan> plans;  // node-based: references stay valid
  std::lock_guard<std::mutex> lock(mutex);
  auto it = plans.find(schema);
  if (it == plans.end()) it = plans.emplace(schema, make_plan(op)).first;
  seen.emplace(schema, &it->second);
  return it->second;
}

// Arguments sharing a storage share one meta (or snapshot) storage, so the kernel sees the
// sharing (overlap checks, in-place ops reading their own output).
class StorageMap {
 public:
  template <typename Make>
  const c10::Storage& get(c10::StorageImpl* s, Make make) {
    for (const auto& [key, value] : storages_) {
      if (key == s) return value;
    }
    storages_.emplace_back(s, make());
    return storages_.back().second;
  }

 private:
  c10::SmallVector<std::pair<c10::StorageImpl*, c10::Storage>, 4> storages_;
};

at::Tensor tensor_like(const at::Tensor& t, c10::Storage storage, c10::DispatchKeySet keys) {
  auto impl = c10::make_intrusive<c10::TensorImpl>(std::move(storage), keys, t.dtype());
  impl->set_sizes_and_strides(t.sizes(), t.strides(), t.storage_offset());
  if (C10_UNLIKELY(t.is_conj())) impl->_set_conj(true);
  if (C10_UNLIKELY(t.is_neg())) impl->_set_neg(true);
  if (C10_UNLIKELY(t.unsafeGetTensorImpl()->is_wrapped_number())) impl->set_wrapped_number(true);
  return at::Tensor(std::move(impl));
}

// Meta tensors shaped like the arguments: the meta kernel says what the results look like. A
// tensor passed twice (`torch.mul(x, y, out=x)`) is one meta tensor, as it is one tensor to the
// kernel, which must not resize an output that is also an input.
class ToMeta {
 public:
  at::Tensor operator()(const at::Tensor& t) {
    // CPU scalars mix with meta tensors as they do with devx ones.
    if (!t.defined() || (t.device().is_cpu() && t.dim() == 0)) return t;
    for (const auto& [impl, meta] : tensors_) {
      if (impl == t.unsafeGetTensorImpl()) return meta;
    }
    c10::StorageImpl* s = t.storage().unsafeGetStorageImpl();
    const c10::Storage& storage = storages_.get(s, [&] {
      return c10::Storage(c10::Storage::use_byte_size_t(), s->nbytes(), c10::DataPtr(nullptr, c10::Device(c10::kMeta)),
                          c10::GetAllocator(c10::kMeta), /*resizable=*/true);
    });
    tensors_.emplace_back(t.unsafeGetTensorImpl(), tensor_like(t, storage, kMetaKeys));
    return tensors_.back().second;
  }

 private:
  StorageMap storages_;
  c10::SmallVector<std::pair<const c10::TensorImpl*, at::Tensor>, 4> tensors_;
};

// A snapshot storage holds a reference on the storage it was taken of.
void release_storage(void* ctx) {
  c10::intrusive_ptr<c10::StorageImpl>::reclaim(static_cast<c10::StorageImpl*>(ctx));
}

// What issued work sees of its arguments: devx tensors over the bytes the argument has now, and
// copies of CPU tensors (the host may overwrite those as soon as the op returns).
class Snapshot {
 public:
  at::Tensor operator()(const at::Tensor& t) {
    if (!t.defined()) return t;
    if (t.device().type() != kDevx) {
      // A wrapped number is made for this call from a Python number: nobody else can change it.
      if (t.unsafeGetTensorImpl()->is_wrapped_number()) return t;
      return t.clone();
    }
    c10::StorageImpl* s = t.storage().unsafeGetStorageImpl();
    const c10::Storage& storage = storages_.get(s, [&] {
      c10::raw::intrusive_ptr::incref(s);
      return c10::Storage(c10::Storage::use_byte_size_t(), s->nbytes(),
                          c10::DataPtr(const_cast<void*>(s->data_ptr().get()), s, &release_storage, s->device()),
                          devx_allocator(), /*resizable=*/false);
    });
    return tensor_like(t, storage, kDevxKeys);
  }

 private:
  StorageMap storages_;
};

// Arguments the native path would reject (other devx devices, CPU tensors that are written or
// neither 0-dim nor indices) are left to it, so the error is the same.
bool arguments_on_device(const Plan& plan, const torch::jit::Stack& stack, size_t first, size_t n,
                         c10::DeviceIndex device) {
  for (size_t i = 0; i < n; ++i) {
    const c10::IValue& v = stack[first + i];
    const bool indices = v.isOptionalTensorList();
    const bool written = plan.written >> i & 1;
    bool ok = true;
    for_each_tensor(v, [&](const at::Tensor& t) {
      if (t.defined()) {
        const c10::Device d = t.device();
        if (d.type() == kDevx ? d.index() != device : written || !(d.is_cpu() && (indices || t.dim() == 0))) {
          ok = false;
        }
      }
    });
    if (!ok) return false;
  }
  return true;
}

bool same_layout(const at::Tensor& a, const at::Tensor& b) {
  return a.defined() == b.defined() &&
         (!a.defined() || (a.sizes() == b.sizes() && a.strides() == b.strides() &&
                           a.storage_offset() == b.storage_offset()));
}

bool same_layout(const c10::IValue& devx, const c10::IValue& meta) {
  if (devx.isTensor()) return same_layout(devx.toTensor(), meta.toTensor());
  if (devx.isTensorList()) {
    auto a = devx.toTensorList();
    auto b = meta.toTensorList();
    for (size_t i = 0; i < a.size(); ++i) {
      if (!same_layout(a[i], b[i])) return false;
    }
  }
  return true;
}

// Whether a written tensor overlaps itself or partly overlaps another argument.
bool overlapping_writes(const torch::jit::Stack& stack, size_t first, size_t n,
                        const std::vector<std::pair<size_t, c10::IValue>>& written) {
  bool overlap = false;
  for (const auto& [index, value] : written) {
    for_each_tensor(value, [&](const at::Tensor& w) {
      if (!w.defined() || w.device().type() != kDevx) return;
      if (at::has_internal_overlap(w) == at::MemOverlap::Yes) overlap = true;
      for (size_t i = first; i < first + n && !overlap; ++i) {
        for_each_tensor(stack[i], [&](const at::Tensor& t) {
          if (t.defined() && t.device().type() == kDevx && at::get_overlap_status(w, t) == at::MemOverlapStatus::Partial) {
            overlap = true;
          }
        });
      }
    });
    if (overlap) return true;
  }
  return false;
}

at::Tensor allocate(const MetaOutput& m) {
  if (!m.defined) return at::Tensor();
  return at::detail::empty_strided_generic(m.sizes, m.strides, devx_allocator(), kDevxKeys, m.dtype);
}

void copy_result(const c10::IValue& target, const c10::IValue& result, c10::DeviceIndex device) {
  auto copy_one = [device](const at::Tensor& dst, const at::Tensor& src) {
    if (!dst.defined()) return;
    TORCH_CHECK(dst.sizes() == src.sizes() && dst.dtype() == src.dtype(), "devx: an issued kernel returned ",
                src.sizes(), " ", src.dtype(), " where its meta kernel promised ", dst.sizes(), " ", dst.dtype());
    // Laid out alike and dense, the bytes are one block: copied as such, without dispatching copy_.
    // Where the compute device is the CPU this move is the simulator's own (a GPU's kernel writes
    // its result in place), not a vendor call the user made: a plain copy, which
    // DEVX_SIM_FAULTS does not fail and runtime tracing does not report.
    if (src.device() == dst.device() && dst.strides() == src.strides() && dst.is_non_overlapping_and_dense()) {
      if (g_vendor->compute_device_type == static_cast<int>(c10::kCPU)) {
        sanitizer::DeviceAccess access;
        std::memcpy(dst.data_ptr(), src.data_ptr(), dst.nbytes());
      } else {
        copy_device_bytes(dst.data_ptr(), src.data_ptr(), dst.nbytes(), device);
      }
    } else {
      dst.copy_(src);
    }
  };
  if (target.isTensor()) {
    copy_one(target.toTensor(), result.toTensor());
    return;
  }
  auto dst = target.toTensorList();
  auto src = result.toTensorList();
  TORCH_CHECK(dst.size() == src.size(), "devx: an issued kernel returned ", src.size(), " tensors, not ", dst.size());
  for (size_t i = 0; i < dst.size(); ++i) copy_one(dst[i], src[i]);
}

// Whether a tensor the op writes is passed again as another argument (`torch.mul(x, y, out=x)`).
// Python meta functions resize such an output with a warning where the kernel refuses to resize
// an output that is also an input: the kernel, run inline, decides.
bool written_and_read(const Plan& plan, const torch::jit::Stack& stack, size_t first, size_t n) {
  for (size_t w = 0; w < n; ++w) {
    if (!(plan.written >> w & 1) || !stack[first + w].isTensor()) continue;
    const c10::TensorImpl* written = stack[first + w].toTensor().unsafeGetTensorImpl();
    bool same = false;
    for (size_t i = 0; i < n; ++i) {
      if (i == w) continue;
      for_each_tensor(stack[first + i], [&](const at::Tensor& t) { same |= t.unsafeGetTensorImpl() == written; });
    }
    if (same) return true;
  }
  return false;
}

// What the meta kernel said of one signature of arguments (the op, each argument's metadata and
// the values of the others): whether the op can be issued, and the layout of each result it
// allocates. Many meta kernels are Python (torch._meta_registrations) or decompositions, which
// cost many times the kernel itself; a training step issues the same signatures every step.
struct IssueLayout {
  bool issuable = false;
  // Per result that is not a written argument: one layout, or one per element of a list.
  std::vector<std::vector<MetaOutput>> fresh;
  // Empty written arguments the op gives a contiguous shape (arange's out=): (index, sizes),
  // resized by the host as it issues, so their new shape is visible at once.
  std::vector<std::pair<size_t, std::vector<int64_t>>> resized;
};

MetaOutput describe(const at::Tensor& m) {
  MetaOutput out;
  if (!m.defined()) return out;
  out.defined = true;
  out.sizes = m.sizes().vec();
  out.strides = m.strides().vec();
  out.dtype = m.scalar_type();
  return out;
}

// Runs the meta kernel on meta copies of the arguments at stack[first].
IssueLayout ask_meta(const c10::OperatorHandle& op, const Plan& plan, const torch::jit::Stack& stack, size_t first,
                     size_t nargs) {
  IssueLayout layout;
  ToMeta to_meta;
  std::vector<c10::IValue> meta_args;
  meta_args.reserve(nargs);
  for (size_t i = 0; i < nargs; ++i) {
    c10::IValue v = stack[first + i];
    if (v.isDevice()) {
      if (v.toDevice().type() == kDevx) v = c10::IValue(c10::Device(c10::kMeta));
    } else {
      map_tensors(v, to_meta);
    }
    meta_args.push_back(std::move(v));
  }
  torch::jit::Stack meta_stack(meta_args);
  try {
    op.redispatchBoxed(kMetaKeys, &meta_stack);
  } catch (const std::exception&) {
    // No meta kernel for these arguments, or an error: the native kernel, run inline, decides.
    return layout;
  }
  // An argument the op resizes or restrides: its new layout must be visible at once. An empty
  // tensor given a contiguous shape is resized by the host (no bytes to keep, no resize warning);
  // the others run inline.
  for (size_t i = 0; i < nargs; ++i) {
    if (!(plan.written >> i & 1) || same_layout(stack[first + i], meta_args[i])) continue;
    if (!stack[first + i].isTensor()) return layout;
    const at::Tensor& arg = stack[first + i].toTensor();
    const at::Tensor& m = meta_args[i].toTensor();
    if (arg.numel() != 0 || !m.is_contiguous() || m.storage_offset() != arg.storage_offset()) return layout;
    layout.resized.emplace_back(i, m.sizes().vec());
  }
  const c10::FunctionSchema& schema = op.schema();
  for (size_t r = 0; r < schema.returns().size(); ++r) {
    const auto* alias = schema.returns()[r].alias_info();
    if (alias && alias->isWrite()) continue;
    std::vector<MetaOutput>& out = layout.fresh.emplace_back();
    auto add = [&](const at::Tensor& m) {
      // A result on another device than meta (a CPU result) has no devx layout to promise.
      if (m.defined() && !m.is_meta()) return false;
      out.push_back(describe(m));
      return true;
    };
    const c10::IValue& m = meta_stack[r];
    if (m.isTensor()) {
      if (!add(m.toTensor())) return IssueLayout();
    } else {
      for (const at::Tensor& e : m.toTensorList()) {
        if (!add(e)) return IssueLayout();
      }
    }
  }
  layout.issuable = true;
  return layout;
}

struct KeyHash {
  size_t operator()(const MetaKey& key) const {
    size_t h = 0;
    for (int64_t v : key) h = h * 1000003 ^ std::hash<int64_t>{}(v);
    return h;
  }
};

// Per thread (the host's threads issue concurrently): no lock. Bounded: a signature seen once in
// a while is asked again.
constexpr size_t kMaxSignatures = 4096;

const IssueLayout& layout_for(const c10::OperatorHandle& op, const Plan& plan, const torch::jit::Stack& stack,
                              size_t first, size_t nargs) {
  thread_local MetaKey key;
  thread_local std::unordered_map<MetaKey, IssueLayout, KeyHash> layouts;
  key.clear();
  key.push_back(static_cast<int64_t>(reinterpret_cast<uintptr_t>(&op.schema())));
  for (size_t i = 0; i < nargs; ++i) {
    const c10::IValue& v = stack[first + i];
    if (!plan.shape_from_values && (v.isDouble() || v.isComplexDouble())) {
      // Of a floating-point value only its kind reaches type promotion (the optimizers' learning
      // rates and bias corrections change every step).
      key.push_back(v.isDouble() ? 4 : 6);
      continue;
    }
    add_key(key, v);
    // The offset is not in a tensor's key; a written argument's decides whether it keeps its layout.
    if (plan.written >> i & 1) for_each_tensor(v, [&](const at::Tensor& t) { key.push_back(t.storage_offset()); });
  }
  auto it = layouts.find(key);
  if (it != layouts.end()) return it->second;
  IssueLayout layout = ask_meta(op, plan, stack, first, nargs);
  if (layouts.size() >= kMaxSignatures) layouts.clear();
  return layouts.emplace(key, std::move(layout)).first->second;
}

bool try_issue(const c10::OperatorHandle& op, const Plan& plan, torch::jit::Stack* stack) {
  const c10::FunctionSchema& schema = op.schema();
  const size_t nargs = schema.arguments().size();
  const size_t first = stack->size() - nargs;
  const c10::DeviceIndex device = current_device();
  if (plan.issuable && !plan.issuable(*stack, first)) return false;
  // A generator of another device: the kernel, run inline, names it.
  if (plan.draws) {
    for (size_t i = first; i < stack->size(); ++i) {
      const c10::IValue& v = (*stack)[i];
      if (v.isGenerator() && v.toGenerator().defined() && v.toGenerator().device().type() != kDevx) return false;
    }
  }
  if (!arguments_on_device(plan, *stack, first, nargs, device) || written_and_read(plan, *stack, first, nargs)) {
    return false;
  }
  // The ops issuing runs itself (meta kernels that are decompositions, copies of CPU arguments)
  // are not the user's: a profile shows only the op issued.
  profiler::HiddenOps hidden_ops;

  const IssueLayout& layout = layout_for(op, plan, *stack, first, nargs);
  if (!layout.issuable) return false;

  std::vector<std::pair<size_t, c10::IValue>> written;
  if (plan.written != 0) {
    for (size_t i = 0; i < nargs; ++i) {
      if (plan.written >> i & 1) written.emplace_back(i, (*stack)[first + i]);
    }
    // Meta tensors have no addresses, so meta kernels cannot refuse overlapping writes; the kernel
    // run inline does, at once, as on the CPU.
    if (overlapping_writes(*stack, first, nargs, written)) return false;
    for (const auto& [i, sizes] : layout.resized) (*stack)[first + i].toTensor().resize_(sizes);
  }

  const auto& returns = schema.returns();
  c10::SmallVector<c10::IValue, 4> results;
  c10::SmallVector<size_t, 4> fresh_index;
  for (size_t r = 0, f = 0; r < returns.size(); ++r) {
    if (const c10::IValue* arg = written_argument_for(schema, returns[r], written)) {
      results.push_back(*arg);
      continue;
    }
    const std::vector<MetaOutput>& fresh = layout.fresh[f++];
    if (returns[r].type()->kind() == c10::TypeKind::TensorType) {
      results.emplace_back(allocate(fresh.at(0)));
    } else {
      c10::List<at::Tensor> list;
      list.reserve(fresh.size());
      for (const MetaOutput& m : fresh) list.push_back(allocate(m));
      results.emplace_back(std::move(list));
    }
    fresh_index.push_back(r);
  }

  Snapshot snapshot;
  torch::jit::Stack work;
  work.reserve(nargs);
  for (size_t i = 0; i < nargs; ++i) {
    c10::IValue v = (*stack)[first + i];
    map_tensors(v, snapshot);
    work.push_back(std::move(v));
  }
  c10::SmallVector<c10::IValue, 2> targets;
  for (size_t r : fresh_index) {
    c10::IValue v = results[r];
    map_tensors(v, snapshot);
    targets.push_back(std::move(v));
  }
  // The op's own kernel, then a copy into the results allocated here: out= overloads would save
  // the copy, but some resize or compute differently from their functional form (smooth_l1_loss).
  const DevxStream stream = getCurrentDevxStream(device);
  if (plan.draws) note_issued_draw(device, stream.id());
  launch_host_work(stream, [op, work = std::move(work), targets = std::move(targets),
                            fresh_index = std::move(fresh_index), stream, site = python_site()]() mutable {
    WorkerScope scope(stream);
    try {
      op.redispatchBoxed(kDevxKeys, &work);
    } catch (const c10::Error& e) {
      // Reported by a later synchronisation, far from the op: the message names the op and the
      // line that issued it. Not a c10::Error, whose what() would carry this thread's backtrace.
      std::string where = site.file ? " at " + site.str() : std::string();
      throw std::runtime_error(c10::str(op.schema().operator_name(), " failed in its kernel (issued asynchronously",
                                        where, "): ", e.what_without_backtrace()));
    }
    for (size_t k = 0; k < targets.size(); ++k) copy_result(targets[k], work[fresh_index[k]], stream.device_index());
  });
  stack->erase(stack->begin() + static_cast<std::ptrdiff_t>(first), stack->end());
  for (c10::IValue& v : results) stack->push_back(std::move(v));
  return true;
}

void issue_boxed(const c10::OperatorHandle& op, c10::DispatchKeySet, torch::jit::Stack* stack) {
  issue(op, stack);
}

}  // namespace

void issue(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const Plan& plan = plan_for(op);
  if (plan.kind == Kind::kIssue && try_issue(op, plan, stack)) return;
  if (plan.kind != Kind::kRunNow) {
    // The op needs the data on the host (nonzero's size, a value-dependent shape), as such ops
    // synchronise on CUDA.
    if (C10_UNLIKELY(sync_debug::mode() != sync_debug::kOff)) {
      sync_debug::report(op.schema().operator_name().name.c_str());
    }
    getCurrentDevxStream(current_device()).synchronize();
  }
  InlineScope scope;
  op.redispatchBoxed(kDevxKeys, stack);
}

const c10::BoxedKernel& issue_kernel() {
  static const c10::BoxedKernel kernel = c10::BoxedKernel::makeFromFunction<&issue_boxed>();
  return kernel;
}

void launch(const std::vector<at::Tensor>& tensors, std::function<void(const std::vector<at::Tensor>&)> work) {
  Snapshot snapshot;
  std::vector<at::Tensor> snapshots;
  snapshots.reserve(tensors.size());
  for (const at::Tensor& t : tensors) snapshots.push_back(snapshot(t));
  const DevxStream stream = getCurrentDevxStream(current_device());
  launch_host_work(stream, [snapshots = std::move(snapshots), work = std::move(work), stream] {
    WorkerScope scope(stream);
    work(snapshots);
  });
}

}  // namespace devx::async
