// Philox 4x32-10, the counter-based generator of Salmon et al., "Parallel Random Numbers: As Easy
// as 1, 2, 3" (SC 2011), which CUDA's curand and PyTorch's CUDA kernels use as well: block i of a
// stream is a pure function of (key, counter i), so threads draw any part of a stream independently
// and a call repeats exactly from the same seed and offset.
#pragma once

#include <array>
#include <cstdint>

namespace devx::cpu_sim::kern::philox {

using Block = std::array<uint32_t, 4>;

// The 128-bit counter is (block index, offset): the offset that ctx->philox_state reserved for
// the call in the high half, the element block in the low half.
inline Block block(uint64_t seed, uint64_t offset, uint64_t index) {
  constexpr uint32_t kMul0 = 0xD2511F53u, kMul1 = 0xCD9E8D57u;
  constexpr uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;
  Block c = {static_cast<uint32_t>(index), static_cast<uint32_t>(index >> 32), static_cast<uint32_t>(offset),
             static_cast<uint32_t>(offset >> 32)};
  uint32_t k0 = static_cast<uint32_t>(seed), k1 = static_cast<uint32_t>(seed >> 32);
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = static_cast<uint64_t>(kMul0) * c[0];
    const uint64_t p1 = static_cast<uint64_t>(kMul1) * c[2];
    c = {static_cast<uint32_t>(p1 >> 32) ^ c[1] ^ k0, static_cast<uint32_t>(p1),
         static_cast<uint32_t>(p0 >> 32) ^ c[3] ^ k1, static_cast<uint32_t>(p0)};
    k0 += kWeyl0;
    k1 += kWeyl1;
  }
  return c;
}

// [0, 1) from the top 24 bits of a draw: every value exact in float.
inline float unit_float(uint32_t x) {
  return static_cast<float>(x >> 8) * (1.0f / 16777216.0f);
}

// [0, 1) from the top 53 bits of two draws: every value exact in double.
inline double unit_double(uint32_t hi, uint32_t lo) {
  const uint64_t x = (static_cast<uint64_t>(hi) << 32) | lo;
  return static_cast<double>(x >> 11) * (1.0 / 9007199254740992.0);
}

// [0, 1) with 32 bits of resolution.
inline double unit32(uint32_t x) {
  return static_cast<double>(x) * (1.0 / 4294967296.0);
}

}  // namespace devx::cpu_sim::kern::philox
