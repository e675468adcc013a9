// Backend metadata of devx tensors: torch._utils.set_tensor_metadata/get_tensor_metadata, the
// interface PyTorch gives a PrivateUse1 backend for per-tensor state it wants kept by torch.save
// (the pickled tensor carries the map and torch.load hands it back). Without a registered pair the
// names set on a devx tensor would be dropped silently; here they are the tensor's (a
// c10::BackendMeta on its TensorImpl), kept by detach() and the other shallow copies (c10 clones
// the BackendMeta), by pickling and torch.save/load, and not by new tensors (clone(), views,
// op results), as conj/neg-style metadata of the CPU is not either.

#include <map>
#include <string>
#include <unordered_map>

#include <c10/core/TensorImpl.h>
#include <torch/csrc/jit/serialization/pickler_helper.h>

#include "runtime/log.h"

namespace devx {
namespace {

struct DevxBackendMeta final : c10::BackendMeta {
  std::map<std::string, bool> entries;

  c10::intrusive_ptr<c10::BackendMeta> clone(const c10::intrusive_ptr<c10::BackendMeta>& self) const override {
    auto copy = c10::make_intrusive<DevxBackendMeta>();
    copy->entries = entries;
    return copy;
  }
};

void get_metadata(const at::Tensor& t, std::unordered_map<std::string, bool>& out) {
  const auto* meta = dynamic_cast<const DevxBackendMeta*>(t.unsafeGetTensorImpl()->get_backend_meta());
  if (!meta) return;
  for (const auto& [name, value] : meta->entries) out.emplace(name, value);
}

// The map replaces the tensor's entries (an empty one clears them); torch itself has taken out
// its own keys ("conj", "neg") before this runs.
void set_metadata(const at::Tensor& t, std::unordered_map<std::string, bool>& in) {
  c10::TensorImpl* impl = t.unsafeGetTensorImpl();
  if (in.empty()) {
    if (impl->get_backend_meta()) impl->set_backend_meta(c10::intrusive_ptr<c10::BackendMeta>());
    return;
  }
  auto meta = c10::make_intrusive<DevxBackendMeta>();
  meta->entries.insert(in.begin(), in.end());
  impl->set_backend_meta(std::move(meta));
}

const bool g_registered = [] {
  try {
    torch::jit::TensorBackendMetaRegistry(c10::DeviceType::PrivateUse1, &get_metadata, &set_metadata);
    return true;
  } catch (const std::exception& e) {  // another PrivateUse1 backend in this process registered first
    log::warn(log::Module::RUNTIME, std::string("devx: tensor metadata is not kept: ") + e.what());
    return false;
  }
}();

}  // namespace
}  // namespace devx
