#pragma once

#include <cstdint>
#include <vector>

#include "core/random.h"
#include "cudaops/dtype.h"

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

/// The library's generator (core/random.h), so that data made on the device is reproduced here.
using detail::mix64;

}  // namespace cudaops::ref
