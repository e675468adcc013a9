#include "distributed/call_check.h"

#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <c10/util/Exception.h>

#include <cstring>
#include <iterator>
#include <sstream>

#include "distributed/issue_state.h"
#include "distributed/work_devx.h"

namespace devx::dist {

namespace {

constexpr uint64_t kFnvOffset = 14695981039346656037ull;
constexpr uint64_t kFnvPrime = 1099511628211ull;
// Each rank's description travels in a fixed-size buffer, so the exchange itself cannot mismatch.
constexpr int64_t kTextBytes = 480;

void wait_or_rethrow(const c10::intrusive_ptr<c10d::Work>& work, const CallSignature& signature,
                     const std::string& engine_name) {
  try {
    work->wait();
  } catch (...) {
    rethrow_engine_error(signature.text() + ") (its cross-rank call check)", engine_name);
  }
}

}  // namespace

CallSignature::CallSignature(const char* collective) : hash_(kFnvOffset), text_(collective) {
  for (const char* c = collective; *c; ++c) mix(*c);
  text_ += "(";
}

void CallSignature::mix(int64_t v) {
  for (int i = 0; i < 8; ++i) {
    hash_ ^= static_cast<uint64_t>(v >> (8 * i)) & 0xff;
    hash_ *= kFnvPrime;
  }
}

CallSignature& CallSignature::tensor(const at::Tensor& t) {
  mix(static_cast<int64_t>(t.scalar_type()));
  mix(t.dim());
  for (int64_t s : t.sizes()) mix(s);
  text_ += (items_++ ? ", " : "") + std::string(c10::toString(t.scalar_type())) + c10::str(t.sizes());
  return *this;
}

CallSignature& CallSignature::tensors(at::TensorList ts) {
  mix(static_cast<int64_t>(ts.size()));
  for (const at::Tensor& t : ts) tensor(t);
  return *this;
}

CallSignature& CallSignature::rows_of(const at::Tensor& t) {
  mix(static_cast<int64_t>(t.scalar_type()));
  mix(t.dim());
  for (int64_t d = 1; d < t.dim(); ++d) mix(t.size(d));
  auto rest = t.dim() > 1 ? t.sizes().slice(1).vec() : std::vector<int64_t>{};
  text_ += (items_++ ? ", " : "") + std::string(c10::toString(t.scalar_type())) + "[*, " + c10::str(rest) + "]";
  return *this;
}

CallSignature& CallSignature::value(const char* name, int64_t v) {
  for (const char* c = name; *c; ++c) mix(*c);
  mix(v);
  text_ += (items_++ ? ", " : "") + std::string(name) + "=" + std::to_string(v);
  return *this;
}

CallSignature& CallSignature::op(const c10d::ReduceOp& op) {
  static const char* const names[] = {"SUM", "AVG", "PRODUCT", "MIN", "MAX", "BAND", "BOR", "BXOR", "PREMUL_SUM"};
  const auto kind = static_cast<int64_t>(op.op_);
  mix(kind);
  const bool known = kind >= 0 && kind < static_cast<int64_t>(std::size(names));
  text_ += (items_++ ? ", " : "") + std::string("op=") + (known ? names[kind] : std::to_string(kind));
  return *this;
}

void check_same_call(c10d::Backend& engine, const CallSignature& signature, const std::string& engine_name) {
  WithoutThreadPythonObjects without_python;
  const int64_t h = static_cast<int64_t>(signature.hash() & ((1ull << 62) - 1));
  at::Tensor bounds = at::empty({2}, at::kLong);
  bounds[0].fill_(h);
  bounds[1].fill_(-h);
  std::vector<at::Tensor> args{bounds};
  c10d::AllreduceOptions max_opts;
  max_opts.reduceOp = c10d::ReduceOp::MAX;
  wait_or_rethrow(engine.allreduce(args, max_opts), signature, engine_name);
  const int64_t* b = bounds.const_data_ptr<int64_t>();
  if (b[0] == h && -b[1] == h) return;

  const std::string own = signature.text() + ")";
  at::Tensor mine = at::zeros({kTextBytes}, at::kByte);
  std::memcpy(mine.mutable_data_ptr(), own.data(), std::min<size_t>(own.size(), kTextBytes - 1));
  std::vector<std::vector<at::Tensor>> all(1);
  for (int r = 0; r < engine.getSize(); ++r) all[0].push_back(at::zeros({kTextBytes}, at::kByte));
  std::vector<at::Tensor> in{mine};
  wait_or_rethrow(engine.allgather(all, in), signature, engine_name);
  std::ostringstream msg;
  msg << "devx: the ranks made different collective calls (sizes, dtypes, ops or roots differ), "
         "which the " << engine_name << " engine cannot run:";
  for (int r = 0; r < engine.getSize(); ++r) {
    msg << "\n  rank " << r << ": " << reinterpret_cast<const char*>(all[0][r].const_data_ptr<uint8_t>());
  }
  C10_THROW_ERROR(DistBackendError, msg.str());
}

void check_pair_sizes(c10d::Backend& engine, const CallSignature& signature, const std::vector<int64_t>& sends,
                      const std::vector<int64_t>& receives, const std::string& engine_name) {
  WithoutThreadPythonObjects without_python;
  const int size = engine.getSize();
  TORCH_INTERNAL_ASSERT(sends.size() == static_cast<size_t>(size) && receives.size() == sends.size());
  at::Tensor mine = at::empty({2 * size}, at::kLong);
  std::memcpy(mine.mutable_data_ptr<int64_t>(), sends.data(), size * sizeof(int64_t));
  std::memcpy(mine.mutable_data_ptr<int64_t>() + size, receives.data(), size * sizeof(int64_t));
  std::vector<std::vector<at::Tensor>> all(1);
  for (int r = 0; r < size; ++r) all[0].push_back(at::empty({2 * size}, at::kLong));
  std::vector<at::Tensor> in{mine};
  wait_or_rethrow(engine.allgather(all, in), signature, engine_name);
  std::ostringstream msg;
  for (int from = 0; from < size; ++from) {
    for (int to = 0; to < size; ++to) {
      const int64_t sent = all[0][from].const_data_ptr<int64_t>()[to];
      const int64_t expected = all[0][to].const_data_ptr<int64_t>()[size + from];
      if (sent != expected) {
        msg << "\n  rank " << from << " sends " << sent << " elements to rank " << to << ", which expects "
            << expected;
      }
    }
  }
  if (msg.tellp() == 0) return;
  C10_THROW_ERROR(DistBackendError, "devx: the ranks' " + signature.text() +
                                        ") calls disagree on the sizes they exchange, which the " + engine_name +
                                        " engine cannot run:" + msg.str());
}

}  // namespace devx::dist
