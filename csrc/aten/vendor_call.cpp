#include "aten/vendor_call.h"

#include <ATen/EmptyTensor.h>
#include <c10/util/irange.h>

#include <cstring>
#include <map>
#include <mutex>
#include <unordered_map>

#include "runtime/allocator.h"
#include "runtime/device.h"
#include "runtime/fork.h"
#include "runtime/generator.h"
#include "runtime/log.h"
#include "runtime/stream.h"

namespace devx {

void* g_vendor_kernels[gen::kNumKernels] = {};
void* g_declined_kernels[gen::kNumOps] = {};
void* g_vendor_adapters[gen::kNumOps] = {};

namespace {

const c10::DispatchKeySet kDevxKeys(c10::DispatchKey::PrivateUse1);

std::atomic<uint64_t> g_calls[gen::kNumKernels];

std::mutex g_declined_mutex;
std::map<std::pair<std::string, std::string>, uint64_t> g_declined;

std::optional<DevxDType> abi_dtype(c10::ScalarType t) {
  switch (t) {
    case c10::kBool: return DEVX_BOOL;
    case c10::kByte: return DEVX_UINT8;
    case c10::kChar: return DEVX_INT8;
    case c10::kShort: return DEVX_INT16;
    case c10::kInt: return DEVX_INT32;
    case c10::kLong: return DEVX_INT64;
    case c10::kHalf: return DEVX_FLOAT16;
    case c10::kBFloat16: return DEVX_BFLOAT16;
    case c10::kFloat: return DEVX_FLOAT32;
    case c10::kDouble: return DEVX_FLOAT64;
    case c10::kComplexFloat: return DEVX_COMPLEX64;
    case c10::kComplexDouble: return DEVX_COMPLEX128;
    default: return std::nullopt;
  }
}

VendorCall* self_of(DevxKernelContext* ctx) {
  return static_cast<VendorCall*>(ctx->core);
}

DevxStatus ctx_workspace(DevxKernelContext* ctx, size_t bytes, void** ptr) {
  return self_of(ctx)->workspace(bytes, ptr);
}

DevxStatus ctx_resize_output(DevxKernelContext* ctx, DevxTensor* out, int32_t ndim, const int64_t* sizes) {
  return self_of(ctx)->resize_output(out, ndim, sizes);
}

// Kernels draw from a counter-based generator keyed by a seed taken from the devx generator, so
// manual_seed and get/set_rng_state replay them; the counters of one call start at 0.
DevxStatus ctx_philox_state(DevxKernelContext* ctx, DevxGenerator generator, uint64_t increment, uint64_t* seed,
                            uint64_t* offset) {
  if (!seed || !offset) return DEVX_ERROR_INVALID;
  at::Generator gen = generator ? *reinterpret_cast<const at::Generator*>(generator)
                                 : default_generator(static_cast<c10::DeviceIndex>(ctx->device));
  // Drawn on the host as the kernel is called: after the draws of random ops issued before it.
  wait_for_issued_draws(gen.device().index());
  auto* impl = gen.get<DevxGeneratorImpl>();
  at::Generator cpu = impl->compute_generator();
  // The compute generator's lock, which ATen's kernels drawing from it take too: the devx
  // generator's is held by Python's get_state, which may wait for this stream's draws.
  std::lock_guard<std::mutex> lock(cpu.mutex());
  *seed = cpu.get<at::CPUGeneratorImpl>()->random64();
  *offset = 0;
  return DEVX_OK;
}

template <typename Store>
std::string dtype_of_first_tensor(const Store& tensors) {
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (tensors[i]->defined()) return std::string(c10::toString(tensors[i]->scalar_type()));
  }
  return "no tensor";
}

struct KeyHash {
  size_t operator()(const std::vector<int64_t>& key) const {
    size_t h = 0;
    for (int64_t v : key) h = h * 1000003 ^ std::hash<int64_t>{}(v);
    return h;
  }
};

// Per thread: no lock on the hot path. Bounded: a signature seen once in a while is asked again.
constexpr size_t kMaxSignaturesPerOp = 512;
thread_local std::unordered_map<std::vector<int64_t>, MetaResult, KeyHash> t_meta_cache;

MetaOutput describe_meta(const at::Tensor& t) {
  MetaOutput m;
  if (!t.defined()) return m;
  m.defined = true;
  m.sizes = t.sizes().vec();
  m.strides = t.strides().vec();
  m.dtype = t.scalar_type();
  return m;
}

}  // namespace

void add_key(MetaKey& key, const at::Tensor& t) {
  key.push_back(1);
  if (!t.defined()) {
    key.push_back(-1);
    return;
  }
  const c10::TensorImpl* impl = t.unsafeGetTensorImpl();
  const c10::Device device = impl->device();
  key.push_back(static_cast<int64_t>(device.type()) << 16 | (device.index() + 1) << 8 |
                static_cast<int64_t>(t.scalar_type()));
  key.push_back(static_cast<int64_t>(impl->layout()) << 8 | impl->is_wrapped_number() << 1 |
                (impl->is_conj() || impl->is_neg()));
  const c10::IntArrayRef sizes = impl->sizes(), strides = impl->strides();
  key.push_back(static_cast<int64_t>(sizes.size()));
  for (size_t d = 0; d < sizes.size(); ++d) {
    key.push_back(sizes[d]);
    key.push_back(strides[d]);
  }
}

void add_key(MetaKey& key, double v) {
  key.push_back(4);
  int64_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  key.push_back(bits);
}

void add_key(MetaKey& key, const c10::Scalar& s) {
  if (s.isSymbolic()) {
    add_key(key, c10::IValue(s));
  } else if (s.isBoolean()) {
    add_key(key, s.toBool());
  } else if (s.isIntegral(false)) {
    add_key(key, s.toLong());
  } else if (s.isComplex()) {
    add_key(key, c10::IValue(s));
  } else {
    add_key(key, s.toDouble());
  }
}

void add_key(MetaKey& key, const at::ITensorListRef& ts) {
  key.push_back(2);
  key.push_back(static_cast<int64_t>(ts.size()));
  for (const at::Tensor& t : ts) add_key(key, t);
}

void add_key(MetaKey& key, const c10::List<std::optional<at::Tensor>>& ts) {
  key.push_back(2);
  key.push_back(static_cast<int64_t>(ts.size()));
  for (const std::optional<at::Tensor>& t : ts) add_key(key, t);
}

void add_key(MetaKey& key, const c10::IValue& v) {
  if (v.isTensor()) {
    add_key(key, v.toTensor());
  } else if (v.isList()) {
    key.push_back(2);
    const c10::List<c10::IValue> list = v.toList();
    key.push_back(static_cast<int64_t>(list.size()));
    for (const c10::IValue& e : list) add_key(key, e);
  } else if (v.isInt()) {
    add_key(key, v.toInt());
  } else if (v.isDouble()) {
    add_key(key, v.toDouble());
  } else if (v.isBool()) {
    add_key(key, v.toBool());
  } else if (v.isComplexDouble()) {
    key.push_back(6);
    const c10::complex<double> c = v.toComplexDouble();
    int64_t bits[2];
    std::memcpy(bits, &c, sizeof bits);
    key.push_back(bits[0]);
    key.push_back(bits[1]);
  } else if (v.isString()) {
    key.push_back(7);
    key.push_back(static_cast<int64_t>(std::hash<std::string_view>{}(v.toStringView())));
  } else if (v.isDevice()) {
    key.push_back(8);
    key.push_back(static_cast<int64_t>(v.toDevice().type()) << 8 | (v.toDevice().index() + 1));
  } else if (v.isSymInt()) {
    add_key(key, v.toSymInt().expect_int());
  } else if (v.isNone()) {
    key.push_back(9);
  } else {
    key.push_back(10);  // a generator: nothing of it reaches a meta function
  }
}

namespace {
// The key of the call being looked up, built in a buffer that keeps its capacity.
DEVX_HOT_TLS thread_local MetaKey* t_key = nullptr;
}  // namespace

MetaKey& VendorCall::lookup_key() const {
  if (C10_UNLIKELY(!t_key)) {
    struct Owner {
      MetaKey key;
      ~Owner() { t_key = nullptr; }
    };
    thread_local Owner owner;
    t_key = &owner.key;
  }
  t_key->clear();
  t_key->push_back(op_);
  return *t_key;
}

const MetaResult* VendorCall::find(const MetaKey& key) {
  auto it = t_meta_cache.find(key);
  if (it != t_meta_cache.end()) return &it->second;
  // The meta function runs before remember(): its own ops may look up keys of theirs.
  key_ = key;
  return nullptr;
}

void VendorCall::remember(std::initializer_list<c10::IValue> outputs) {
  if (t_meta_cache.size() >= kMaxSignaturesPerOp * 8) t_meta_cache.clear();
  MetaResult r;
  for (const c10::IValue& v : outputs) {
    std::vector<MetaOutput>& out = r.outputs.emplace_back();
    if (v.isTensor()) {
      out.push_back(describe_meta(v.toTensor()));
    } else if (v.isTensorList()) {
      for (const at::Tensor& t : v.toTensorList()) out.push_back(describe_meta(t));
    }
  }
  t_meta_cache.emplace(std::move(key_), std::move(r));
}

at::Tensor VendorCall::result(const MetaResult* hit, size_t i) {
  const MetaOutput& m = hit->outputs[i].at(0);
  if (!m.defined) return at::Tensor();
  return at::detail::empty_strided_generic(m.sizes, m.strides, devx_allocator(), kDevxKeys, m.dtype);
}

std::vector<at::Tensor> VendorCall::result_list(const MetaResult* hit, size_t i) {
  std::vector<at::Tensor> r;
  for (const MetaOutput& m : hit->outputs[i]) {
    r.push_back(m.defined ? at::detail::empty_strided_generic(m.sizes, m.strides, devx_allocator(), kDevxKeys, m.dtype)
                          : at::Tensor());
  }
  return r;
}

void VendorCall::resize_outputs_to(const MetaResult* hit, std::initializer_list<c10::IValue> outs) {
  size_t i = 0;
  auto fit = [](const at::Tensor& t, const MetaOutput& m) {
    if (!t.defined() || t.sizes() == c10::IntArrayRef(m.sizes)) return;
    t.resize_(m.sizes);
    if (t.strides() != c10::IntArrayRef(m.strides)) t.as_strided_(m.sizes, m.strides);
  };
  for (const c10::IValue& v : outs) {
    const std::vector<MetaOutput>& recorded = hit->outputs.at(i++);
    if (v.isTensor()) {
      fit(v.toTensor(), recorded.at(0));
    } else {
      size_t k = 0;
      for (const at::Tensor& t : v.toTensorList()) fit(t, recorded.at(k++));
    }
  }
}

VendorCall::VendorCall(int op, int kernel)
    : op_(op), kernel_(kernel), device_(current_device()), stream_(getCurrentDevxStream(device_)) {
  ctx_.device = device_;
  ctx_.stream = stream_.handle();
  ctx_.workspace = &ctx_workspace;
  ctx_.resize_output = &ctx_resize_output;
  ctx_.philox_state = &ctx_philox_state;
  ctx_.core = this;
  // A vendor's kernels are called directly, not through the runtime calls a forked child refuses.
  check_not_forked();
}

VendorCall::~VendorCall() = default;

std::string VendorCall::op_name() const {
  return op_ >= 0 ? op_overload_name(op_) : std::string("copy_");
}

void VendorCall::check_device(const at::Tensor& t, bool output) const {
  if (t.device().type() == kDevx && t.device().index() == device_) return;
  if (t.device().type() != kDevx && t.is_cpu() && t.dim() == 0 && !output) return;
  TORCH_CHECK(false, "Expected all tensors to be on the same device, but found at least two devices, ",
              devx_device(device_), " and ", t.device(), "! (devx ops take tensors of one devx device; only 0-dim "
              "CPU tensors may be mixed in, as on CUDA)");
}

at::Tensor VendorCall::meta(const at::Tensor& t) {
  if (!t.defined()) return t;
  check_device(t, false);
  // A 0-dim CPU tensor becomes a meta one too (meta functions check devices, as masked_fill's
  // value does); a wrapped number stays: Python meta functions read it as a number.
  if (t.device().type() != kDevx && t.unsafeGetTensorImpl()->is_wrapped_number()) return t;
  return at::detail::empty_strided_meta(t.sizes(), t.strides(), t.scalar_type(), std::nullopt,
                                        c10::Device(c10::kMeta), std::nullopt);
}

std::optional<at::Tensor> VendorCall::meta(const std::optional<at::Tensor>& t) {
  if (!t) return std::nullopt;
  return meta(*t);
}

std::vector<at::Tensor> VendorCall::meta(at::TensorList ts) {
  std::vector<at::Tensor> r;
  r.reserve(ts.size());
  for (const at::Tensor& t : ts) r.push_back(meta(t));
  return r;
}

std::vector<at::Tensor> VendorCall::meta(const at::ITensorListRef& ts) {
  std::vector<at::Tensor> r;
  for (const at::Tensor& t : ts) r.push_back(meta(t));
  return r;
}

c10::List<std::optional<at::Tensor>> VendorCall::meta(const c10::List<std::optional<at::Tensor>>& ts) {
  c10::List<std::optional<at::Tensor>> r;
  r.reserve(ts.size());
  for (const std::optional<at::Tensor>& t : ts) r.push_back(meta(t));
  return r;
}

std::optional<c10::Device> VendorCall::meta(std::optional<c10::Device> d) {
  if (d && d->type() == kDevx) return c10::Device(c10::kMeta);
  return d;
}

at::Tensor VendorCall::meta_out(const at::Tensor& t) {
  check_device(t, true);
  at::Tensor m = meta(t);
  outputs_.emplace_back(t, m);
  return m;
}

std::vector<at::Tensor> VendorCall::meta_out(at::TensorList ts) {
  std::vector<at::Tensor> r;
  r.reserve(ts.size());
  for (const at::Tensor& t : ts) r.push_back(meta_out(t));
  return r;
}

void VendorCall::resize_outputs() {
  for (auto& [t, m] : outputs_) {
    if (t.sizes() == m.sizes()) continue;
    t.resize_(m.sizes());
    if (t.strides() != m.strides()) t.as_strided_(m.sizes(), m.strides());
  }
}

c10::List<std::optional<at::Tensor>> VendorCall::expand_masks(const c10::List<std::optional<at::Tensor>>& indices) {
  bool any_mask = false;
  for (const std::optional<at::Tensor>& t : indices) {
    any_mask = any_mask || (t && t->defined() && (t->scalar_type() == c10::kBool || t->scalar_type() == c10::kByte));
  }
  if (!any_mask) return indices;
  c10::List<std::optional<at::Tensor>> expanded;
  for (const std::optional<at::Tensor>& t : indices) {
    if (!t || !t->defined() || (t->scalar_type() != c10::kBool && t->scalar_type() != c10::kByte)) {
      expanded.push_back(t);
      continue;
    }
    const at::Tensor nonzero = t->nonzero();
    for (int64_t d = 0; d < t->dim(); ++d) expanded.push_back(nonzero.select(1, d));
  }
  return expanded;
}

at::Tensor VendorCall::result_to_size(c10::ScalarType dtype) {
  return at::detail::empty_generic({0}, devx_allocator(), kDevxKeys, dtype, std::nullopt);
}

at::Tensor VendorCall::result(const at::Tensor& m) {
  // An output the op does not compute (convolution_backward's masked gradients) stays undefined.
  if (!m.defined()) return m;
  return at::detail::empty_strided_generic(m.sizes(), m.strides(), devx_allocator(), kDevxKeys, m.scalar_type());
}

std::vector<at::Tensor> VendorCall::result(const std::vector<at::Tensor>& m) {
  std::vector<at::Tensor> r;
  r.reserve(m.size());
  for (const at::Tensor& t : m) r.push_back(result(t));
  return r;
}

DevxTensor* VendorCall::describe(const at::Tensor& t, bool output) {
  if (!t.defined()) return nullptr;
  check_device(t, output);
  const int32_t device = t.device().type() == kDevx ? device_ : DEVX_HOST_SCALAR;
  if (t.layout() != c10::kStrided) decline_reason(std::string("layout ") + c10::toString(t.layout()));
  const std::optional<DevxDType> dtype = abi_dtype(t.scalar_type());
  if (!dtype) decline_reason(std::string("dtype ") + c10::toString(t.scalar_type()));
  tensors_.emplace_back(&t);
  is_output_.emplace_back(output);
  return &descs_.emplace_back(DevxTensor{t.numel() == 0 ? nullptr : const_cast<void*>(t.const_data_ptr()),
                                         dtype.value_or(DEVX_FLOAT32), static_cast<int32_t>(t.dim()),
                                         t.sizes().data(), t.strides().data(), device, 0});
}

DevxTensorList VendorCall::describe_list(at::TensorList ts, bool output) {
  std::vector<DevxTensor*>& items = lists_.emplace_back();
  items.reserve(ts.size());
  for (const at::Tensor& t : ts) items.push_back(describe(t, output));
  return {items.data(), static_cast<int64_t>(items.size())};
}

DevxTensorList VendorCall::arg(const at::ITensorListRef& ts) {
  std::vector<DevxTensor*>& items = lists_.emplace_back();
  for (const at::Tensor& t : ts) items.push_back(describe(t, false));
  return {items.data(), static_cast<int64_t>(items.size())};
}

DevxTensorList VendorCall::arg(const c10::List<std::optional<at::Tensor>>& ts) {
  std::vector<DevxTensor*>& items = lists_.emplace_back();
  items.reserve(ts.size());
  // A c10::List hands out its elements as temporaries: those described are kept here.
  for (const std::optional<at::Tensor>& t : ts) {
    items.push_back(t && t->defined() ? describe(held_.emplace_back(*t), false) : nullptr);
  }
  return {items.data(), static_cast<int64_t>(items.size())};
}

const DevxScalar* VendorCall::arg(const c10::Scalar& s) {
  DevxScalar& d = scalars_.emplace_back();
  if (s.isBoolean()) {
    d.kind = DEVX_SCALAR_BOOL;
    d.i = s.toBool() ? 1 : 0;
  } else if (s.isIntegral(false)) {
    d.kind = DEVX_SCALAR_INT;
    d.i = s.toLong();
  } else if (s.isComplex()) {
    d.kind = DEVX_SCALAR_COMPLEX;
    const c10::complex<double> c = s.toComplexDouble();
    d.f = c.real();
    d.imag = c.imag();
  } else {
    if (s.isSymbolic()) decline_reason("a symbolic scalar");
    d.kind = DEVX_SCALAR_FLOAT;
    d.f = s.isSymbolic() ? 0.0 : s.toDouble();
  }
  if (d.kind != DEVX_SCALAR_FLOAT) d.f = d.kind == DEVX_SCALAR_COMPLEX ? d.f : static_cast<double>(d.i);
  return &d;
}

DevxScalarList VendorCall::arg(c10::ArrayRef<c10::Scalar> s) {
  std::vector<DevxScalar>& list = scalar_lists_.emplace_back();
  list.reserve(s.size());
  for (const c10::Scalar& v : s) list.push_back(*arg(v));
  return {list.data(), static_cast<int64_t>(list.size())};
}

const int64_t* VendorCall::arg(std::optional<int64_t> v) {
  if (!v) return nullptr;
  return &ints_.emplace_back(*v);
}

const int64_t* VendorCall::arg(const std::optional<c10::SymInt>& v) {
  if (!v) return nullptr;
  return &ints_.emplace_back(v->expect_int());
}

const double* VendorCall::arg(std::optional<double> v) {
  if (!v) return nullptr;
  return &doubles_.emplace_back(*v);
}

const int* VendorCall::arg(std::optional<bool> v) {
  if (!v) return nullptr;
  return &bools_.emplace_back(*v ? 1 : 0);
}

DevxDType VendorCall::arg(c10::ScalarType t) {
  const std::optional<DevxDType> d = abi_dtype(t);
  if (!d) decline_reason(std::string("dtype ") + c10::toString(t));
  return d.value_or(DEVX_FLOAT32);
}

const DevxDType* VendorCall::arg(std::optional<c10::ScalarType> t) {
  if (!t) return nullptr;
  return &dtypes_.emplace_back(arg(*t));
}

const char* VendorCall::arg(std::string_view s) {
  return strings_.emplace_back(s).c_str();
}

DevxGenerator VendorCall::arg(const std::optional<at::Generator>& g) {
  if (!g || !g->defined()) return nullptr;
  TORCH_CHECK(g->device().type() == kDevx, "Expected a 'devx' device type for generator but found '", g->device().type(),
              "'");
  return reinterpret_cast<DevxGenerator>(const_cast<at::Generator*>(&*g));
}

const DevxIntList* VendorCall::arg(at::OptionalIntArrayRef v) {
  if (!v) return nullptr;
  return &int_lists_.emplace_back(arg(*v));
}

const DevxIntList* VendorCall::arg(at::OptionalSymIntArrayRef v) {
  if (!v) return nullptr;
  return &int_lists_.emplace_back(arg(*v));
}

const DevxFloatList* VendorCall::arg(std::optional<c10::ArrayRef<double>> v) {
  if (!v) return nullptr;
  return &float_lists_.emplace_back(arg(*v));
}

void VendorCall::decline_reason(std::string reason) {
  if (unsupported_.empty()) unsupported_ = std::move(reason);
}

DevxStatus VendorCall::workspace(size_t bytes, void** ptr) {
  if (!ptr) return DEVX_ERROR_INVALID;
  try {
    workspaces_.push_back(devx_allocator()->allocate(bytes));
  } catch (const c10::OutOfMemoryError&) {
    return DEVX_ERROR_OOM;
  }
  *ptr = workspaces_.back().get();
  return DEVX_OK;
}

DevxStatus VendorCall::resize_output(DevxTensor* out, int32_t ndim, const int64_t* sizes) {
  size_t i = 0;
  while (i < descs_.size() && &descs_[i] != out) ++i;
  if (i == descs_.size() || ndim < 0 || (ndim > 0 && !sizes)) return DEVX_ERROR_INVALID;
  const at::Tensor& t = *tensors_[i];
  // nonzero's result is column-major on the CPU and CUDA (their kernels fill an (ndim, N) tensor
  // and return its transpose, into an out= tensor that is not already of the result's size too);
  // so is the result a kernel sizes here, which writes through the strides it is given.
  static const int nonzero = kernel_index("nonzero.out");
  const c10::IntArrayRef requested(sizes, static_cast<size_t>(ndim));
  try {
    if (kernel_ == nonzero && ndim == 2 && t.sizes() != requested) {
      t.resize_({sizes[1], sizes[0]});
      t.t_();
    } else {
      t.resize_(requested);
    }
  } catch (const c10::OutOfMemoryError&) {
    return DEVX_ERROR_OOM;
  }
  out->data = t.numel() == 0 ? nullptr : t.mutable_data_ptr();
  out->ndim = ndim;
  out->sizes = t.sizes().data();
  out->strides = t.strides().data();
  return DEVX_OK;
}

bool VendorCall::finish(DevxStatus status) {
  if (status == DEVX_OK) {
    g_calls[kernel_].fetch_add(1, std::memory_order_relaxed);
    // What the kernel queued reads its inputs and workspaces until the stream has run it. Outputs
    // need no holding: a block is free for its stream's later work once its last work is queued.
    // Storages, not tensors: the stream's thread may drop the last reference, and a tensor's
    // Python object would need the GIL there (at interpreter exit, a thread taking it is ended).
    if (!stream_.query()) {
      std::vector<c10::Storage> storages;
      for (size_t i = 0; i < tensors_.size(); ++i) {
        if (!is_output_[i] && tensors_[i]->device().type() == kDevx) storages.push_back(tensors_[i]->storage());
      }
      auto workspaces = std::make_shared<std::vector<c10::DataPtr>>(std::move(workspaces_));
      launch_host_work(stream_, [storages = std::move(storages), workspaces = std::move(workspaces)] {});
    }
    return true;
  }
  const std::string kernel = kKernelNames[kernel_];
  if (status != DEVX_DECLINED) {
    TORCH_CHECK(false, "devx: vendor ", g_vendor->name, " kernel ", kernel, " (for ", op_name(),
                ") failed (", status_name(status), "): ", g_vendor->last_error());
  }
  // An op declined while the host issued it asks the vendor again where the stream runs it; the
  // host counted it already.
  if (on_stream_work()) return false;
  std::string reason = unsupported_.empty() ? dtype_of_first_tensor(tensors_) : unsupported_;
  bool first = false;
  {
    std::lock_guard<std::mutex> lock(g_declined_mutex);
    first = g_declined[{op_name(), reason}]++ == 0;
  }
  if (first) {
    log::info(log::Module::FALLBACK, std::string("vendor ") + g_vendor->name + " declined " + kernel + " (for " +
                                         op_name() + ", " + reason + "); running " +
                                         (op_ < 0 || g_declined_kernels[op_] ? "ATen's kernel on devx memory" : "the CPU fallback"));
  }
  return false;
}

VendorKernelStats vendor_kernel_stats() {
  VendorKernelStats stats;
  for (int k = 0; k < gen::kNumKernels; ++k) {
    const uint64_t n = g_calls[k].load(std::memory_order_relaxed);
    if (n) stats.calls.emplace_back(kKernelNames[k], n);
  }
  std::lock_guard<std::mutex> lock(g_declined_mutex);
  for (const auto& [key, n] : g_declined) stats.declined.emplace_back(key.first, key.second, n);
  return stats;
}

void reset_vendor_kernel_stats() {
  for (auto& c : g_calls) c.store(0, std::memory_order_relaxed);
  std::lock_guard<std::mutex> lock(g_declined_mutex);
  g_declined.clear();
}

int kernel_index(const std::string& name) {
  static const std::unordered_map<std::string, int> index = [] {
    std::unordered_map<std::string, int> m;
    for (int k = 0; k < gen::kNumKernels; ++k) m.emplace(kKernelNames[k], k);
    return m;
  }();
  auto it = index.find(name);
  return it == index.end() ? -1 : it->second;
}

std::vector<std::string> bind_vendor_kernels(const DevxVendorKernel* table) {
  std::vector<std::string> unknown;
  for (const DevxVendorKernel* k = table; k && k->op; ++k) {
    TORCH_CHECK(k->fn, "devx: vendor ", g_vendor->name, "'s kernel table has a NULL function for '", k->op, "'");
    const int index = kernel_index(k->op);
    if (index < 0) {
      unknown.emplace_back(k->op);
      continue;
    }
    g_vendor_kernels[index] = k->fn;
  }
  return unknown;
}

}  // namespace devx
