#pragma once

#include <cstdint>
#include <initializer_list>
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

/// The bytes an argument covers, for the overlap check: a matrix of rows x width elements
/// (row_stride apart) or a vector (rows 1). Build after the argument's own checks passed (its
/// span then fits int64). `written`: an output. `aliasable`: a matrix the op may read and write
/// in place, so that an output and an input that are the same matrix (same pointer and stride)
/// are allowed.
struct Region {
  const char* name = "";
  uintptr_t begin = 0;
  uintptr_t end = 0;        // one past the last byte; begin == end when empty
  uintptr_t stride = 0;     // bytes from one row to the next (0: one contiguous range)
  uintptr_t row_bytes = 0;  // bytes of each row
  bool written = false;
  bool aliasable = false;
};

inline Region matrix_region(const char* name, const void* data, int64_t row_stride, int64_t rows,
                            int64_t width, DType dtype, bool written, bool aliasable = true) {
  Region r;
  r.name = name;
  r.written = written;
  r.aliasable = aliasable;
  if (data == nullptr || rows <= 0 || width <= 0) return r;
  const auto size = static_cast<uintptr_t>(dtype_size(dtype));
  r.begin = reinterpret_cast<uintptr_t>(data);
  r.end = r.begin + static_cast<uintptr_t>((rows - 1) * row_stride + width) * size;
  r.stride = rows > 1 ? static_cast<uintptr_t>(row_stride) * size : 0;
  r.row_bytes = static_cast<uintptr_t>(width) * size;
  return r;
}

inline Region vector_region(const char* name, const void* data, int64_t count, DType dtype,
                            bool written) {
  return matrix_region(name, data, count, 1, count, dtype, written, false);
}

/// `bytes` bytes from `data` (a workspace), never aliasable.
inline Region byte_region(const char* name, const void* data, size_t bytes, bool written) {
  Region r;
  r.name = name;
  r.written = written;
  if (data == nullptr || bytes == 0) return r;
  r.begin = reinterpret_cast<uintptr_t>(data);
  r.end = bytes > UINTPTR_MAX - r.begin ? UINTPTR_MAX : r.begin + bytes;
  return r;
}

/// Whether two regions share a byte. Matrices of one row stride are compared row by row, so
/// that side-by-side column blocks of one buffer (x = buf[:, :c], y = buf[:, c:]) are apart.
inline bool regions_overlap(const Region& a, const Region& b) {
  if (a.begin == a.end || b.begin == b.end) return false;
  if (a.end <= b.begin || b.end <= a.begin) return false;
  const uintptr_t stride = a.stride != 0 ? a.stride : b.stride;
  if (stride == 0 || (a.stride != 0 && a.stride != stride) ||
      (b.stride != 0 && b.stride != stride) || a.row_bytes == 0 || b.row_bytes == 0) {
    return true;
  }
  // The later one's rows begin `offset` bytes into the earlier one's row grid.
  const Region& lo = a.begin <= b.begin ? a : b;
  const Region& hi = a.begin <= b.begin ? b : a;
  const uintptr_t offset = (hi.begin - lo.begin) % stride;
  return !(offset >= lo.row_bytes && offset + hi.row_bytes <= stride);
}

/// Refuses two regions that share a byte when one of them is written, but for an output that is
/// exactly an aliasable input (in place). Pairs of inputs may overlap freely.
inline Status check_overlaps(const char* op, std::initializer_list<Region> regions) {
  for (auto a = regions.begin(); a != regions.end(); ++a) {
    for (auto b = a + 1; b != regions.end(); ++b) {
      if (!a->written && !b->written) continue;
      if (!regions_overlap(*a, *b)) continue;
      const bool same = a->begin == b->begin && a->end == b->end && a->stride == b->stride;
      if (same && a->aliasable && b->aliasable && a->written != b->written) continue;
      std::ostringstream text;
      text << op << ": " << a->name << " and " << b->name << " overlap";
      if (same && a->written && b->written) {
        text << " (both are written: they must be distinct)";
      } else if (same) {
        text << " (only an output and an input of the same matrix may be one array)";
      } else {
        text << " without being the same " << (a->aliasable && b->aliasable ? "matrix" : "array")
             << "; only exact in-place use is allowed";
      }
      return Status(StatusCode::kInvalidArgument, text.str());
    }
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
