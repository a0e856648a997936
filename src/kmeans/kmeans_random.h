#pragma once

// The generator of kmeans's random initial rows, shared by the kernels and the host reference so
// that both draw the same rows.
#include <cstdint>

#include "reference/host_array.h"

namespace cudaops::detail::kmeans {

/// The i-th draw of problem b's generator, uniform in [0, bound] (bound < 2^63).
inline CUDAOPS_HOST_DEVICE int64_t random_draw(uint64_t seed, int64_t b, int64_t i, int64_t bound) {
  const uint64_t stream = ref::mix64(seed ^ ref::mix64(static_cast<uint64_t>(b)));
  const uint64_t r = ref::mix64(stream + static_cast<uint64_t>(i));
  return static_cast<int64_t>(r % (static_cast<uint64_t>(bound) + 1));
}

}  // namespace cudaops::detail::kmeans
