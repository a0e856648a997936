#pragma once

#include <cstdint>
#include <vector>

#include "cudaops/dtype.h"

// The hash below is also compiled for the device where nvcc includes this header, so that data made
// on the device can be reproduced on the host bit for bit.
#if defined(__CUDACC__)
#define CUDAOPS_HOST_DEVICE __host__ __device__
#else
#define CUDAOPS_HOST_DEVICE
#endif

namespace cudaops::ref {

/// A host array of any library dtype, stored exactly as the device stores it, read and written
/// as double.
class HostArray {
 public:
  HostArray() = default;
  HostArray(DType dtype, int64_t size);

  DType dtype() const { return dtype_; }
  int64_t size() const { return size_; }
  int64_t size_bytes() const { return static_cast<int64_t>(bytes_.size()); }
  void* data() { return bytes_.data(); }
  const void* data() const { return bytes_.data(); }

  double get(int64_t i) const;
  /// Stores value rounded to the dtype (through float for float16 and bfloat16).
  void set(int64_t i, double value);
  std::vector<double> to_double() const;

 private:
  DType dtype_ = DType::kFloat32;
  int64_t size_ = 0;
  std::vector<unsigned char> bytes_;
};

/// Fills with values whose magnitude is uniform in [0.5, 2) (after rounding to the dtype), with a
/// random sign: never zero, with sums that cancel and sums that do not. Deterministic in seed.
void fill_random(HostArray& array, uint64_t seed);

/// A 64-bit mix of (seed, index), used for reproducible random data on host and device.
inline CUDAOPS_HOST_DEVICE uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace cudaops::ref
