// The generated wrappers bench/ times (bench_wrappers.cpp, generated with the product's wrappers
// by scripts/autogen/gen.py): each op's wrapper, and the same wrapper with the diagnostics gate
// compiled out.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/DispatchKeySet.h>
#include <c10/core/Scalar.h>

namespace devx::bench {

using BinaryWrapper = at::Tensor (*)(c10::DispatchKeySet, const at::Tensor&, const at::Tensor&, const c10::Scalar&);
struct WrapperPair {
  const char* op;  // "add.Tensor"
  BinaryWrapper with_diagnostics;
  BinaryWrapper without_diagnostics;
};
// Ends with an entry whose op is null.
extern const WrapperPair kWrapperPairs[];

}  // namespace devx::bench
