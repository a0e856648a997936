#pragma once

// The library's one random generator: a 64-bit mix of (seed, index), compiled for host and device,
// so that what a kernel draws (k-means' random initial rows) can be drawn again on the host, bit
// for bit, by a reference or a test.
#include <cstdint>

#if defined(__CUDACC__)
#define CUDAOPS_HOST_DEVICE __host__ __device__
#else
#define CUDAOPS_HOST_DEVICE
#endif

namespace cudaops::detail {

/// SplitMix64's finaliser of x (plus its increment): a bijection whose outputs look independent.
inline CUDAOPS_HOST_DEVICE uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

/// The i-th draw of problem b's generator, uniform in [0, bound] (bound < 2^63): k-means' random
/// initial rows (KmeansInit::kRandom), on the device and in the host reference.
inline CUDAOPS_HOST_DEVICE int64_t random_draw(uint64_t seed, int64_t b, int64_t i, int64_t bound) {
  const uint64_t stream = mix64(seed ^ mix64(static_cast<uint64_t>(b)));
  const uint64_t r = mix64(stream + static_cast<uint64_t>(i));
  return static_cast<int64_t>(r % (static_cast<uint64_t>(bound) + 1));
}

}  // namespace cudaops::detail
