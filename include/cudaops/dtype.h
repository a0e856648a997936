#pragma once

#include <cstdint>
#include <string_view>

#include "cudaops/export.h"
#include "cudaops/status.h"

namespace cudaops {

/// Element types. Data is float32, float16 or bfloat16; indices are int32 or int64.
enum class DType : int32_t {
  kFloat32 = 0,
  kFloat16 = 1,
  kBFloat16 = 2,
  kInt32 = 3,
  kInt64 = 4,
};

/// Canonical name ("float32", "float16", "bfloat16", "int32", "int64"), or "invalid".
CUDAOPS_EXPORT const char* dtype_name(DType dtype) noexcept;

/// Size of one element in bytes, or 0 for a value outside the enumeration.
CUDAOPS_EXPORT int64_t dtype_size(DType dtype) noexcept;

/// True for float32, float16 and bfloat16.
CUDAOPS_EXPORT bool dtype_is_floating(DType dtype) noexcept;

/// Parses a dtype name. Accepts the canonical names and the usual short ones: f32/fp32/float,
/// f16/fp16/half, bf16, i32/int, i64/long; case-insensitive. On failure *dtype is untouched and
/// the status names the text and the accepted names.
CUDAOPS_EXPORT Status parse_dtype(std::string_view name, DType* dtype);

}  // namespace cudaops
