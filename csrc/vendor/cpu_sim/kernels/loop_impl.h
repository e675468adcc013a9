// Loop<N>'s templates (included by common.h).
#pragma once

#include <array>
#include <stdexcept>
#include <vector>

namespace devx::cpu_sim::kern {

template <size_t N>
Loop<N>::Loop(const Dims& shape_, const std::array<Dims, N>& operand_strides) {
  // Keep the dimensions of size > 1, then merge neighbours that are laid out as one for every
  // operand, so that a contiguous tensor is one row.
  for (size_t d = 0; d < shape_.size(); ++d) {
    if (shape_[d] == 1) continue;
    std::array<int64_t, N> s;
    for (size_t k = 0; k < N; ++k) s[k] = operand_strides[k][d];
    if (!shape.empty()) {
      bool merge = true;
      for (size_t k = 0; k < N; ++k) merge = merge && strides.back()[k] == s[k] * shape_[d];
      if (merge) {
        shape.back() *= shape_[d];
        strides.back() = s;
        continue;
      }
    }
    shape.push_back(shape_[d]);
    strides.push_back(s);
  }
  for (int64_t n : shape_) {
    if (n == 0) {
      shape.assign(1, 0);
      strides.assign(1, std::array<int64_t, N>{});
      return;
    }
  }
  if (shape.empty()) {
    shape.push_back(1);
    strides.push_back(std::array<int64_t, N>{});
  }
}

template <size_t N>
int64_t Loop<N>::numel() const {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return n;
}

// inner(const std::array<int64_t, N>& offsets, int64_t n, const std::array<int64_t, N>& strides)
// for the elements [begin, end) in row-major order, one call per (part of a) row.
template <size_t N>
template <typename F>
void Loop<N>::run(int64_t begin, int64_t end, F&& inner) const {
  if (begin >= end) return;
  const int nd = static_cast<int>(shape.size());
  const int64_t row = shape[nd - 1];
  // Shapes are at most a few dimensions after merging: the index lives on the stack.
  std::array<int64_t, 64> index{};
  if (nd > 64) throw std::runtime_error("cpu_sim kernel: more than 64 dimensions");
  int64_t rem = begin;
  for (int d = nd - 1; d >= 0; --d) {
    index[d] = rem % shape[d];
    rem /= shape[d];
  }
  std::array<int64_t, N> base{};
  for (int d = 0; d < nd; ++d) {
    for (size_t k = 0; k < N; ++k) base[k] += index[d] * strides[d][k];
  }
  int64_t pos = begin;
  while (pos < end) {
    const int64_t n = std::min(row - index[nd - 1], end - pos);
    inner(base, n, strides[nd - 1]);
    pos += n;
    // Step to the start of the next row.
    for (size_t k = 0; k < N; ++k) base[k] += n * strides[nd - 1][k];
    index[nd - 1] += n;
    for (int d = nd - 1; d > 0 && index[d] == shape[d]; --d) {
      for (size_t k = 0; k < N; ++k) base[k] += strides[d - 1][k] - shape[d] * strides[d][k];
      index[d] = 0;
      ++index[d - 1];
    }
  }
}

}  // namespace devx::cpu_sim::kern
