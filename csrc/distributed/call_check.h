// Checking that every rank makes the same collective call before the engine sees it.
//
// gloo answers a call whose sizes differ across ranks by aborting the process from one of its
// transport threads (an uncatchable gloo::EnforceNotMet), and other engines hang or read past a
// buffer. So each rank first describes its call — collective, reduce op, root, dtypes and shapes,
// whatever must agree across ranks — and the ranks compare a 62-bit hash of the descriptions in
// one small all-reduce (MAX of h and of -h: equal on every rank iff all hashes are equal). Only
// on a mismatch do they exchange the readable descriptions, so the error names every rank's call.
// A repeated all_reduce skips this round (call_ledger.h).
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/csrc/distributed/c10d/Backend.hpp>

#include <string>
#include <vector>

namespace devx::dist {

class CallSignature {
 public:
  explicit CallSignature(const char* collective);
  CallSignature& tensor(const at::Tensor& t);
  CallSignature& tensors(at::TensorList ts);
  // The dtype and the sizes after the first dimension (alltoall with per-rank splits).
  CallSignature& rows_of(const at::Tensor& t);
  CallSignature& value(const char* name, int64_t v);
  CallSignature& op(const c10d::ReduceOp& op);

  uint64_t hash() const { return hash_; }
  const std::string& text() const { return text_; }

 private:
  void mix(int64_t v);
  uint64_t hash_;
  std::string text_;
  int items_ = 0;
};

// Throws a DistBackendError (a RuntimeError, as the errors of NCCL's and gloo's own checks are)
// listing every rank's call unless all ranks made this one. `engine` runs collectives on CPU
// tensors.
void check_same_call(c10d::Backend& engine, const CallSignature& signature, const std::string& engine_name);

// For a call in which every pair of ranks exchanges its own number of elements (all_to_all with
// per-pair sizes), which no hash of one rank's call can check: `sends[j]` is what this rank sends
// to rank j, `receives[j]` what it expects from rank j. Every rank learns every rank's counts, so
// all of them throw the same DistBackendError naming the pairs that disagree.
void check_pair_sizes(c10d::Backend& engine, const CallSignature& signature, const std::vector<int64_t>& sends,
                      const std::vector<int64_t>& receives, const std::string& engine_name);

}  // namespace devx::dist
