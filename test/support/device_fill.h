#pragma once

// Random data made on the device and reproduced on the host from the same (seed, index) hash:
// for arrays too large to generate and upload from the host quickly.
#include <cuda_runtime_api.h>

#include <cstdint>

#include "cudaops/dtype.h"
#include "cudaops/status.h"
#include "reference/host_array.h"

namespace cudaops::testing {

/// The float32 value at index i: magnitude in [0.5, 2) with 23 random bits, random sign; exact in
/// float32, so the device and the host compute the same bits.
inline CUDAOPS_HOST_DEVICE float hashed_value(uint64_t seed, int64_t i) {
  const uint64_t r = ref::mix64(ref::mix64(seed) ^ static_cast<uint64_t>(i));
  float v = 1.0f + static_cast<float>(r >> 41) * 0x1.0p-23f;  // [1, 2)
  if (r & 2u) v *= 0.5f;
  return (r & 1u) ? -v : v;
}

/// Fills n elements of dtype (float types) with hashed_value(seed, i) rounded to dtype.
Status fill_hashed(void* d_data, DType dtype, int64_t n, uint64_t seed, cudaStream_t stream);

}  // namespace cudaops::testing
