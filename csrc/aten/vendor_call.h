// One call of a vendor's own kernel (devx_kernel_abi.h), as the generated adapters make it.
//
// The adapter (scripts/autogen/gen.py, one per op variant a kernel serves) runs the op's meta
// function on meta copies of its arguments (checks, broadcasting, type promotion, result shapes),
// allocates fresh results from the devx allocator, turns every argument into its C form with
// `arg`/`out`, and calls the kernel. A declined call (an unsupported dtype found here, or
// DEVX_DECLINED from the kernel) runs what the op would run without the vendor's kernel:
// `run_declined`.
#pragma once

#include <ATen/core/Generator.h>
#include <ATen/core/List.h>
#include <ATen/core/Tensor.h>
#include <c10/core/DispatchKeySet.h>
#include <c10/core/Scalar.h>
#include <c10/util/OptionalArrayRef.h>

#include <array>
#include <atomic>
#include <deque>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "aten/async_ops.h"
#include "aten/op_wrapper.h"
#include "aten/op_registry.h"
#include "runtime/stream.h"
#include "runtime/vendor.h"
#include "op_table.h"

namespace devx {

inline const c10::DispatchKeySet kMetaKeys{c10::DispatchKey::Meta};

// The vendor's kernel functions, by kernel index (generated list), filled at load.
extern void* g_vendor_kernels[gen::kNumKernels];
// The generated adapter of op i, nullptr where no kernel of the ABI serves it.
extern void* g_vendor_adapters[gen::kNumOps];
// What a declined call of op i runs: the compute device's kernel on aliases, or nullptr for the
// CPU fallback.
extern void* g_declined_kernels[gen::kNumOps];

// What an op's meta function said for one signature of arguments (their metadata, and the
// values of non-tensor arguments): the layout of each output. Meta functions of many ops are
// Python (torch._meta_registrations), far too slow to run per call; training runs the same
// signatures again and again.
struct MetaOutput {
  bool defined = false;
  std::vector<int64_t> sizes;
  std::vector<int64_t> strides;
  c10::ScalarType dtype = c10::kFloat;
};
struct MetaResult {
  std::vector<std::vector<MetaOutput>> outputs;  // per output: one entry, or one per list item
};

// Values handed out by address for one call: the first N inline (no allocation for a typical
// op), the rest in a deque (stable addresses too).
template <typename T, size_t N>
class StableStore {
 public:
  template <typename... A>
  T& emplace_back(A&&... args) {
    if (size_ < N) {
      T& slot = inline_[size_++];
      slot = T(std::forward<A>(args)...);
      return slot;
    }
    if (!more_) more_ = std::make_unique<std::deque<T>>();
    ++size_;
    return more_->emplace_back(std::forward<A>(args)...);
  }
  size_t size() const { return size_; }
  T& operator[](size_t i) { return i < N ? inline_[i] : (*more_)[i - N]; }
  const T& operator[](size_t i) const { return i < N ? inline_[i] : (*more_)[i - N]; }

 private:
  std::array<T, N> inline_{};
  size_t size_ = 0;
  std::unique_ptr<std::deque<T>> more_;
};

// The key of a meta-cache lookup: the op, then each argument as a few integers. Each kind of
// value starts with its own code, so that different kinds never give one key. Arguments are
// encoded as they are, not boxed: an IValue per argument (a reference count taken and dropped
// per tensor, a List per int list) cost more than the rest of the lookup.
using MetaKey = std::vector<int64_t>;
void add_key(MetaKey& key, const c10::IValue& v);
void add_key(MetaKey& key, const at::Tensor& t);
void add_key(MetaKey& key, const c10::Scalar& s);
inline void add_key(MetaKey& key, int64_t v) {
  key.push_back(3);
  key.push_back(v);
}
inline void add_key(MetaKey& key, const c10::SymInt& v) { add_key(key, v.expect_int()); }
inline void add_key(MetaKey& key, bool v) {
  key.push_back(5);
  key.push_back(v);
}
void add_key(MetaKey& key, double v);
template <typename T>
void add_key(MetaKey& key, const std::optional<T>& v) {
  if (v) {
    add_key(key, *v);
  } else {
    key.push_back(9);
  }
}
template <typename T>
void add_key(MetaKey& key, c10::ArrayRef<T> v) {
  key.push_back(2);
  key.push_back(static_cast<int64_t>(v.size()));
  for (const T& e : v) add_key(key, e);
}
template <typename T>
void add_key(MetaKey& key, const c10::OptionalArrayRef<T>& v) {
  if (v) {
    add_key(key, *v);
  } else {
    key.push_back(9);
  }
}
void add_key(MetaKey& key, const at::ITensorListRef& ts);
void add_key(MetaKey& key, const c10::List<std::optional<at::Tensor>>& ts);
// Anything else (dtypes, layouts, devices, strings, generators) as its IValue.
template <typename T>
void add_key(MetaKey& key, const T& v) {
  add_key(key, c10::IValue(v));
}

class VendorCall {
 public:
  // `op`: the generated op served (index in the op table), or -1 for copy_ (copy.cpp).
  VendorCall(int op, int kernel);
  ~VendorCall();
  VendorCall(const VendorCall&) = delete;
  VendorCall& operator=(const VendorCall&) = delete;

  // Meta copies for the op's meta function. CPU scalars (wrapped numbers) stay as they are.
  at::Tensor meta(const at::Tensor& t);
  std::optional<at::Tensor> meta(const std::optional<at::Tensor>& t);
  std::vector<at::Tensor> meta(at::TensorList ts);
  std::vector<at::Tensor> meta(const at::ITensorListRef& ts);
  c10::List<std::optional<at::Tensor>> meta(const c10::List<std::optional<at::Tensor>>& ts);
  std::optional<c10::Device> meta(std::optional<c10::Device> d);
  // An out= argument: after the meta function ran, resize_outputs() gives the devx tensor the
  // shape its meta copy was given.
  at::Tensor meta_out(const at::Tensor& t);
  std::vector<at::Tensor> meta_out(at::TensorList ts);
  void resize_outputs();

  // Advanced indices with boolean masks replaced by the long indices of their nonzero elements.
  c10::List<std::optional<at::Tensor>> expand_masks(const c10::List<std::optional<at::Tensor>>& indices);
  // An empty devx result of `dtype` that the kernel gives its size (dynamic_output in ops.yaml).
  at::Tensor result_to_size(c10::ScalarType dtype);

  // The meta function's answer for these arguments, if it has been asked before (in this thread).
  template <typename... A>
  const MetaResult* lookup(const A&... args) {
    MetaKey& key = lookup_key();
    (add_key(key, args), ...);
    return find(key);
  }
  // Records the outputs (tensors, or tensor lists) the meta function laid out for the arguments
  // of the lookup that missed.
  void remember(std::initializer_list<c10::IValue> outputs);
  at::Tensor result(const MetaResult* hit, size_t i);
  std::vector<at::Tensor> result_list(const MetaResult* hit, size_t i);
  // out= arguments laid out as recorded.
  void resize_outputs_to(const MetaResult* hit, std::initializer_list<c10::IValue> outs);

  // A fresh devx result laid out as meta result `m`.
  at::Tensor result(const at::Tensor& m);
  std::vector<at::Tensor> result(const std::vector<at::Tensor>& m);

  // C forms of the arguments.
  const DevxTensor* arg(const at::Tensor& t) { return describe(t, false); }
  const DevxTensor* arg(const std::optional<at::Tensor>& t) { return t && t->defined() ? describe(*t, false) : nullptr; }
  DevxTensorList arg(at::TensorList ts) { return describe_list(ts, false); }
  DevxTensorList arg(const at::ITensorListRef& ts);
  DevxTensorList arg(const c10::List<std::optional<at::Tensor>>& ts);
  const DevxScalar* arg(const c10::Scalar& s);
  const DevxScalar* arg(const std::optional<c10::Scalar>& s) { return s ? arg(*s) : nullptr; }
  DevxScalarList arg(c10::ArrayRef<c10::Scalar> s);
  int64_t arg(int64_t v) { return v; }
  int64_t arg(const c10::SymInt& v) { return v.expect_int(); }
  const int64_t* arg(std::optional<int64_t> v);
  const int64_t* arg(const std::optional<c10::SymInt>& v);
  double arg(double v) { return v; }
  const double* arg(std::optional<double> v);
  int arg(bool v) { return v ? 1 : 0; }
  const int* arg(std::optional<bool> v);
  DevxDType arg(c10::ScalarType t);
  const DevxDType* arg(std::optional<c10::ScalarType> t);
  const char* arg(std::string_view s);
  const char* arg(std::optional<std::string_view> s) { return s ? arg(*s) : nullptr; }
  DevxGenerator arg(const std::optional<at::Generator>& g);
  DevxIntList arg(c10::IntArrayRef v) { return {v.data(), static_cast<int64_t>(v.size())}; }
  DevxIntList arg(c10::SymIntArrayRef v) { return arg(C10_AS_INTARRAYREF_SLOW(v)); }
  const DevxIntList* arg(at::OptionalIntArrayRef v);
  const DevxIntList* arg(at::OptionalSymIntArrayRef v);
  DevxFloatList arg(c10::ArrayRef<double> v) { return {v.data(), static_cast<int64_t>(v.size())}; }
  const DevxFloatList* arg(std::optional<c10::ArrayRef<double>> v);
  template <size_t N>
  DevxBoolList arg(const std::array<bool, N>& v) {
    return {reinterpret_cast<const uint8_t*>(v.data()), static_cast<int64_t>(N)};
  }
  DevxTensor* out(const at::Tensor& t) { return describe(t, true); }
  DevxTensorList out(at::TensorList ts) { return describe_list(ts, true); }

  DevxKernelContext* context() { return &ctx_; }
  // False when an argument has a form the ABI cannot carry (a dtype outside DevxDType, a
  // layout other than strided): the call is declined without asking the vendor.
  bool ready() const { return unsupported_.empty(); }
  // True for DEVX_OK; false for a declined call (counted); throws for an error.
  bool finish(DevxStatus status);

  // DevxKernelContext entries.
  DevxStatus workspace(size_t bytes, void** ptr);
  DevxStatus resize_output(DevxTensor* out, int32_t ndim, const int64_t* sizes);

 private:
  // The error CUDA's kernels give for tensors of another device (0-dim CPU inputs are allowed).
  void check_device(const at::Tensor& t, bool output) const;
  DevxTensor* describe(const at::Tensor& t, bool output);
  DevxTensorList describe_list(at::TensorList ts, bool output);
  void decline_reason(std::string reason);
  // This thread's key buffer, cleared and started with the op (it keeps its capacity).
  MetaKey& lookup_key() const;
  const MetaResult* find(const MetaKey& key);
  std::string op_name() const;

  int op_;
  int kernel_;
  c10::DeviceIndex device_;
  DevxStream stream_;
  DevxKernelContext ctx_;
  // Stable addresses: descriptors are handed out by pointer.
  StableStore<DevxTensor, 6> descs_;
  // What descs_[i] describes: the adapter's own arguments and results, which outlive the call.
  // Pointers, not copies: taking a reference on a tensor that has a Python object takes the GIL
  // (torch keeps the object alive while C++ holds the tensor), which cost more than the kernel.
  StableStore<const at::Tensor*, 6> tensors_;
  StableStore<at::Tensor, 1> held_;  // list elements that exist only as temporaries
  StableStore<bool, 6> is_output_;
  StableStore<std::vector<DevxTensor*>, 1> lists_;
  StableStore<DevxScalar, 3> scalars_;
  StableStore<std::vector<DevxScalar>, 1> scalar_lists_;
  StableStore<int64_t, 2> ints_;
  StableStore<double, 2> doubles_;
  StableStore<int, 2> bools_;
  StableStore<DevxDType, 1> dtypes_;
  StableStore<std::string, 1> strings_;
  StableStore<DevxIntList, 2> int_lists_;
  StableStore<DevxFloatList, 1> float_lists_;
  std::vector<c10::DataPtr> workspaces_;
  std::vector<std::pair<at::Tensor, at::Tensor>> outputs_;  // (devx, meta) of out= arguments
  std::string unsupported_;
  MetaKey key_;  // of a lookup that missed
};

// Runs op `op` as it would run without the vendor's kernel (the call was declined).
template <typename Sig, typename... Args>
decltype(auto) run_declined(int op, Args&&... args) {
  static const c10::DispatchKeySet ks(c10::DispatchKey::PrivateUse1);
  void* otherwise = g_declined_kernels[op];
  if (otherwise && C10_UNLIKELY(g_async_host_streams) && async::issuing()) {
    return call_boxed<Sig>(async::issue_kernel(), op, ks, std::forward<Args>(args)...);
  }
  if (otherwise) return reinterpret_cast<Sig*>(otherwise)(std::forward<Args>(args)...);
  return call_boxed<Sig>(fallback_kernel(), op, ks, std::forward<Args>(args)...);
}

// Calls of vendor kernels so far: accepted, and declined (by op and dtype).
struct VendorKernelStats {
  std::vector<std::pair<std::string, uint64_t>> calls;
  std::vector<std::tuple<std::string, std::string, uint64_t>> declined;  // (op, reason, count)
};
VendorKernelStats vendor_kernel_stats();
void reset_vendor_kernel_stats();

// Fills g_vendor_kernels from the vendor's table; returns the names it did not know.
std::vector<std::string> bind_vendor_kernels(const DevxVendorKernel* table);
// The index of kernel `name` ("add.out") in the generated list, -1 if none.
int kernel_index(const std::string& name);
// Kernel index serving generated op `op`, -1 if none (generated).
extern const int kOpKernel[gen::kNumOps];
extern const char* const kKernelNames[gen::kNumKernels];
// Whether op i's adapter runs the op's meta function (all but dynamic_output ops; generated).
extern const bool kOpAdapterNeedsMeta[gen::kNumOps];

}  // namespace devx
