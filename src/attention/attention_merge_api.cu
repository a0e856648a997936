// attention_merge: partial attentions merged by their log-sum-exps, a block per row (small:
// decode rows are few and short, so one kernel for every dtype, dispatched here).
#include <cmath>
#include <string>

#include "core/checked.h"
#include "core/dispatch.cuh"
#include "core/kernel_families.h"
#include "core/launch.h"
#include "core/validate.h"
#include "cudaops/attention.h"
#include "device/numeric.cuh"

namespace cudaops {
namespace detail::attention {
namespace {

constexpr const char* kOp = "attention_merge";
constexpr int kThreads = 128;

/// Row blockIdx.x (grid-strided): the parts' weights exp(l_p - max), then each element of the
/// row summed over the parts in order.
template <typename T>
__global__ void __launch_bounds__(kThreads)
    merge_kernel(const T* outs, const float* lses, T* out, float* lse, int64_t parts, int64_t rows,
                 int64_t dim) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    float m = -INFINITY;
    for (int64_t p = 0; p < parts; ++p)
      m = fmaxf(m, lses[p * rows + r]);
    float sum = 0.0f;
    for (int64_t p = 0; p < parts; ++p)
      sum += m == -INFINITY ? 0.0f : expf(lses[p * rows + r] - m);
    const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
    for (int64_t e = threadIdx.x; e < dim; e += kThreads) {
      float acc = 0.0f;
      for (int64_t p = 0; p < parts; ++p) {
        const float w = m == -INFINITY ? 0.0f : expf(lses[p * rows + r] - m);
        if (w != 0.0f) acc = fmaf(w, to_float(outs[(p * rows + r) * dim + e]), acc);
      }
      out[r * dim + e] = from_float<T>(acc * inv);
    }
    if (lse != nullptr && threadIdx.x == 0) lse[r] = sum > 0.0f ? m + logf(sum) : -INFINITY;
  }
}

const void* family_kernel() {
  return reinterpret_cast<const void*>(merge_kernel<float>);
}
CUDAOPS_KERNEL_FAMILY("attention_merge", "attention_merge_api.cu", family_kernel);

}  // namespace
}  // namespace detail::attention

Status attention_merge(const void* d_outs, const float* d_lses, void* d_out, float* d_lse,
                       int64_t parts, int64_t rows, int64_t dim, DType dtype, cudaStream_t stream) {
  using detail::attention::kOp;
  const std::string op = kOp;
  for (const auto& [name, value] :
       {std::pair<const char*, int64_t>{"parts", parts}, {"rows", rows}, {"dim", dim}}) {
    if (value < 0) {
      return Status(StatusCode::kInvalidArgument,
                    op + ": " + name + " must be >= 0, got " + std::to_string(value));
    }
  }
  if (parts == 0 && rows > 0) {
    return Status(StatusCode::kInvalidArgument, op + ": parts must be >= 1 when rows are given");
  }
  int64_t in_elems = 0, out_elems = 0, in_rows = 0;
  if (!detail::checked_product({parts, rows, dim}, &in_elems) ||
      !detail::checked_mul(rows, dim, &out_elems) || !detail::checked_mul(parts, rows, &in_rows) ||
      in_elems > (int64_t{1} << 60)) {
    return Status(StatusCode::kInvalidArgument, op + ": parts * rows * dim overflows");
  }
  if (dtype_size(dtype) <= 0 ||
      (dtype != DType::kFloat32 && dtype != DType::kFloat16 && dtype != DType::kBFloat16)) {
    return Status(StatusCode::kUnsupportedDtype, op + ": dtype " + dtype_name(dtype) +
                                                     " is not supported; expected float32, "
                                                     "float16 or bfloat16");
  }
  if (rows == 0) return Status();
  if (Status s = detail::check_pointer(kOp, "d_outs", d_outs, in_elems, dtype); !s.ok()) return s;
  if (Status s = detail::check_pointer(kOp, "d_lses", d_lses, in_rows, DType::kFloat32); !s.ok()) {
    return s;
  }
  if (Status s = detail::check_pointer(kOp, "d_out", d_out, out_elems, dtype); !s.ok()) return s;
  if (d_lse != nullptr) {
    if (Status s = detail::check_pointer(kOp, "d_lse", d_lse, rows, DType::kFloat32); !s.ok()) {
      return s;
    }
  }
  const auto element = static_cast<size_t>(dtype_size(dtype));
  if (Status s = detail::check_overlaps(
          kOp,
          {detail::byte_region("d_outs", d_outs, static_cast<size_t>(in_elems) * element, false),
           detail::byte_region("d_lses", d_lses, static_cast<size_t>(in_rows) * 4, false),
           detail::byte_region("d_out", d_out, static_cast<size_t>(out_elems) * element, true),
           detail::byte_region("d_lse", d_lse, static_cast<size_t>(rows) * 4, true)});
      !s.ok()) {
    return s;
  }
  return detail::dispatch_float(kOp, dtype, [&](auto zero) -> Status {
    using T = decltype(zero);
    const auto blocks = static_cast<unsigned>(std::min<int64_t>(rows, 65535));
    detail::attention::merge_kernel<T><<<blocks, detail::attention::kThreads, 0, stream>>>(
        static_cast<const T*>(d_outs), d_lses, static_cast<T*>(d_out), d_lse, parts, rows, dim);
    return detail::check_launch(kOp, stream);
  });
}

}  // namespace cudaops
