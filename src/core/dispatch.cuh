#pragma once

// The one dtype dispatch of the kernels: calls f(T{}) with the storage type of dtype, or returns
// kUnsupportedDtype for a dtype with no floating kernel.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <type_traits>

#include "core/validate.h"
#include "cudaops/dtype.h"
#include "cudaops/status.h"

namespace cudaops::detail {

template <typename F>
Status dispatch_float(const char* op, DType dtype, F&& f) {
  switch (dtype) {
    case DType::kFloat32:
      return f(float{});
    case DType::kFloat16:
      return f(__half{});
    case DType::kBFloat16:
      return f(__nv_bfloat16{});
    default:
      return check_float_dtype(op, "dtype", dtype);
  }
}

}  // namespace cudaops::detail

namespace cudaops::detail {

/// The dtype whose storage type is T.
template <typename T>
inline constexpr DType kDTypeOf = std::is_same_v<T, float>    ? DType::kFloat32
                                  : std::is_same_v<T, __half> ? DType::kFloat16
                                                              : DType::kBFloat16;

}  // namespace cudaops::detail
