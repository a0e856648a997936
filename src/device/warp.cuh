#pragma once

// Warp-wide constants and sums.

namespace cudaops::detail {
namespace {

constexpr int kWarp = 32;
constexpr unsigned kFull = 0xffffffffu;

/// The sum of v over the warp; every lane gets it.
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1)
    v += __shfl_xor_sync(kFull, v, o);
  return v;
}

}  // namespace
}  // namespace cudaops::detail
