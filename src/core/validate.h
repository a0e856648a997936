#pragma once

#include <cstdint>
#include <limits>
#include <sstream>
#include <string>

#include "core/checked.h"
#include "cudaops/dtype.h"
#include "cudaops/status.h"

namespace cudaops::detail {

// Host-side argument checks run before any CUDA call. Each returns success or a status whose
// message names the op and the argument; the text is built only on failure.

inline Status check_count(const char* op, const char* name, int64_t value) {
  if (value >= 0) return Status();
  std::ostringstream text;
  text << op << ": " << name << " must be >= 0, got " << value;
  return Status(StatusCode::kInvalidArgument, text.str());
}

/// A device pointer that is read or written when `count` > 0: not null, aligned to the element.
inline Status check_pointer(const char* op, const char* name, const void* ptr, int64_t count,
                            DType dtype) {
  if (count == 0) return Status();
  if (ptr == nullptr) {
    std::ostringstream text;
    text << op << ": " << name << " must not be null when " << count << " elements are given";
    return Status(StatusCode::kInvalidArgument, text.str());
  }
  const int64_t size = dtype_size(dtype);
  if (size > 0 && reinterpret_cast<uintptr_t>(ptr) % static_cast<uintptr_t>(size) != 0) {
    std::ostringstream text;
    text << op << ": " << name << " (" << ptr << ") must be aligned to " << size << " bytes for "
         << dtype_name(dtype);
    return Status(StatusCode::kMisaligned, text.str());
  }
  return Status();
}

/// A matrix of rows x width elements read or written when both are > 0: not null, aligned to the
/// element, row_stride >= width, and every element and byte offset it spans addressable in int64
/// (one row included: 1 x 2^62 float32 is refused). width_name names the width in the message
/// ("cols", "k").
inline Status check_matrix(const char* op, const char* name, const void* data, int64_t row_stride,
                           int64_t rows, int64_t width, DType dtype,
                           const char* width_name = "cols") {
  if (rows == 0 || width == 0) return Status();
  const int64_t size = dtype_size(dtype) > 0 ? dtype_size(dtype) : 1;
  // From the first element to one past the last: (rows - 1) * row_stride + width elements;
  // row_stride * size is what the kernels step by.
  int64_t span = 0, bytes = 0, step = 0;
  const bool fits = rows > 0 && width > 0 && checked_mul(rows - 1, row_stride, &span) &&
                    checked_add(span, width, &span) && checked_mul(span, size, &bytes) &&
                    checked_mul(row_stride, size, &step);
  if (row_stride < width) {
    std::ostringstream text;
    text << op << ": " << name << " row_stride " << row_stride << " must be >= " << width_name
         << " (" << width << ")";
    return Status(StatusCode::kInvalidArgument, text.str());
  }
  if (!fits) {
    std::ostringstream text;
    text << op << ": " << name << " spans more than 2^63 bytes (rows " << rows << ", " << width_name
         << " " << width << ", row_stride " << row_stride << ", " << dtype_name(dtype) << ")";
    return Status(StatusCode::kInvalidArgument, text.str());
  }
  return check_pointer(op, name, data, rows * width, dtype);  // rows * width <= span
}

inline bool is_float_dtype(DType dtype) {
  return dtype == DType::kFloat32 || dtype == DType::kFloat16 || dtype == DType::kBFloat16;
}

inline Status check_float_dtype(const char* op, const char* name, DType dtype) {
  if (is_float_dtype(dtype)) return Status();
  std::ostringstream text;
  text << op << ": " << name << " " << dtype_name(dtype) << " (" << static_cast<int>(dtype)
       << ") is not supported; expected float32, float16 or bfloat16";
  return Status(StatusCode::kUnsupportedDtype, text.str());
}

}  // namespace cudaops::detail
