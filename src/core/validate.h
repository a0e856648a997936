#pragma once

#include <cstdint>
#include <sstream>
#include <string>

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
