#include "reference/host_array.h"

#include <cstring>
#include <stdexcept>
#include <string>

#include "core/checked.h"
#include "reference/host_float.h"

namespace cudaops::ref {

namespace {

size_t checked_bytes(DType dtype, int64_t size) {
  int64_t bytes = 0;
  if (!detail::checked_product({size, dtype_size(dtype)}, &bytes)) {
    throw std::length_error("a host array of " + std::to_string(size) + " " + dtype_name(dtype) +
                            " elements: its size in bytes does not fit 64 bits");
  }
  return static_cast<size_t>(bytes);
}

}  // namespace

HostArray::HostArray(DType dtype, int64_t size)
    : dtype_(dtype), size_(size), bytes_(checked_bytes(dtype, size)) {}

double HostArray::get(int64_t i) const {
  const unsigned char* p = bytes_.data() + i * dtype_size(dtype_);
  switch (dtype_) {
    case DType::kFloat32: {
      float v;
      std::memcpy(&v, p, sizeof v);
      return v;
    }
    case DType::kFloat16:
    case DType::kBFloat16: {
      uint16_t v;
      std::memcpy(&v, p, sizeof v);
      return dtype_ == DType::kFloat16 ? half_bits_to_float(v) : bfloat16_bits_to_float(v);
    }
    case DType::kInt32: {
      int32_t v;
      std::memcpy(&v, p, sizeof v);
      return v;
    }
    case DType::kInt64: {
      int64_t v;
      std::memcpy(&v, p, sizeof v);
      return static_cast<double>(v);
    }
  }
  return 0.0;
}

void HostArray::set(int64_t i, double value) {
  unsigned char* p = bytes_.data() + i * dtype_size(dtype_);
  switch (dtype_) {
    case DType::kFloat32: {
      const float v = static_cast<float>(value);
      std::memcpy(p, &v, sizeof v);
      return;
    }
    case DType::kFloat16:
    case DType::kBFloat16: {
      const float f = static_cast<float>(value);
      const uint16_t v =
          dtype_ == DType::kFloat16 ? float_to_half_bits(f) : float_to_bfloat16_bits(f);
      std::memcpy(p, &v, sizeof v);
      return;
    }
    case DType::kInt32: {
      const int32_t v = static_cast<int32_t>(value);
      std::memcpy(p, &v, sizeof v);
      return;
    }
    case DType::kInt64: {
      const int64_t v = static_cast<int64_t>(value);
      std::memcpy(p, &v, sizeof v);
      return;
    }
  }
}

std::vector<double> HostArray::to_double() const {
  std::vector<double> out(static_cast<size_t>(size_));
  for (int64_t i = 0; i < size_; ++i)
    out[static_cast<size_t>(i)] = get(i);
  return out;
}

void fill_random(HostArray& array, uint64_t seed) {
  const uint64_t stream = mix64(seed);
  for (int64_t i = 0; i < array.size(); ++i) {
    const uint64_t r = mix64(stream ^ static_cast<uint64_t>(i));
    // 52 random bits for the magnitude in [0.5, 2), one for the sign.
    const double unit = static_cast<double>(r >> 12) * 0x1.0p-52;  // [0, 1)
    const double magnitude = 0.5 + 1.5 * unit;
    array.set(i, (r & 1u) ? -magnitude : magnitude);
  }
}

}  // namespace cudaops::ref
