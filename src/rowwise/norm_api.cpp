// layer_norm, rms_norm and fused_add_rms_norm, and the backward passes of the two norms: the
// public entry points, which check every argument and pick the kernels' dtype.
#include <algorithm>
#include <string>

#include "core/dispatch.cuh"
#include "core/validate.h"
#include "cudaops/rowwise.h"
#include "rowwise/norm_host.h"
#include "rowwise/rowwise_launch.h"

namespace cudaops {
namespace detail::rowwise {
namespace {

template <Norm kNorm>
Status launch_forward(const char* op, const NormArgs<void>& a, bool aligned, DType dtype,
                      cudaStream_t stream, RowPlan* dry = nullptr) {
  return dispatch_float(op, dtype, [&](auto tag) {
    return launch_norm_forward<kNorm, decltype(tag)>(op, a, aligned, stream, dry);
  });
}

/// The launch of a backward pass: which kernel, its grid, and the workspace it needs.
template <bool kLayer>
Status plan_backward(const char* op, int64_t rows, int64_t cols, DType dtype, bool aligned,
                     ParamGradPlan* plan) {
  *plan = ParamGradPlan();
  if (rows == 0 || cols == 0) return Status();
  DeviceLimits limits;
  if (Status s = current_device_limits(op, &limits); !s.ok()) return s;
  return dispatch_float(op, dtype, [&](auto tag) {
    return plan_norm_backward<kLayer, decltype(tag)>(op, rows, cols, aligned, limits, plan);
  });
}

template <bool kLayer>
Status workspace_size(const char* op, int64_t rows, int64_t cols, DType dtype, size_t* bytes) {
  if (bytes == nullptr) {
    return Status(StatusCode::kInvalidArgument, std::string(op) + ": bytes must not be null");
  }
  if (Status s = check_shape(op, rows, cols); !s.ok()) return s;
  if (Status s = check_float_dtype(op, "dtype", dtype); !s.ok()) return s;
  ParamGradPlan vector_plan, scalar_plan;
  if (Status s = plan_backward<kLayer>(op, rows, cols, dtype, true, &vector_plan); !s.ok())
    return s;
  if (Status s = plan_backward<kLayer>(op, rows, cols, dtype, false, &scalar_plan); !s.ok())
    return s;
  *bytes = std::max(vector_plan.workspace, scalar_plan.workspace);
  return Status();
}

template <bool kLayer>
Status launch_backward(const char* op, const NormBackwardArgs<void>& untyped, void* dweight,
                       void* dbias, void* workspace, size_t workspace_bytes, bool aligned,
                       DType dtype, cudaStream_t stream) {
  constexpr int K = kLayer ? 2 : 1;
  ParamGradPlan plan;
  if (Status s = plan_backward<kLayer>(op, untyped.rows, untyped.cols, dtype, aligned, &plan);
      !s.ok())
    return s;
  if (workspace_bytes < plan.workspace) {
    return Status(StatusCode::kWorkspaceTooSmall,
                  std::string(op) + ": workspace_bytes " + std::to_string(workspace_bytes) +
                      " is less than the " + std::to_string(plan.workspace) +
                      " bytes this problem needs (see " + op + "_workspace_size)");
  }
  if (plan.workspace > 0 && (workspace == nullptr || !aligned16(workspace))) {
    return Status(workspace == nullptr ? StatusCode::kInvalidArgument : StatusCode::kMisaligned,
                  std::string(op) + ": workspace must be a 16-byte aligned device pointer");
  }
  float* partials = static_cast<float*>(workspace);
  Status status = dispatch_float(op, dtype, [&](auto tag) {
    return launch_norm_backward<kLayer, decltype(tag)>(op, untyped, plan, partials, aligned,
                                                       stream);
  });
  if (!status.ok()) return status;
  void* outputs[2] = {dweight, dbias};
  return launch_reduce_partials(op, partials, plan.units, untyped.cols, outputs, K, dtype, stream);
}

}  // namespace

Status plan_norm_forward(const char* op, Norm kind, int64_t rows, int64_t cols, DType dtype,
                         bool aligned, RowPlan* plan) {
  const NormArgs<void> a{nullptr, cols,    nullptr, cols, nullptr, nullptr, nullptr,
                         cols,    nullptr, nullptr, rows, cols,    1e-5f};
  switch (kind) {
    case Norm::kLayer:
      return launch_forward<Norm::kLayer>(op, a, aligned, dtype, nullptr, plan);
    case Norm::kRms:
      return launch_forward<Norm::kRms>(op, a, aligned, dtype, nullptr, plan);
    case Norm::kAddRms:
      break;
  }
  return launch_forward<Norm::kAddRms>(op, a, aligned, dtype, nullptr, plan);
}

Status plan_norm_backward(const char* op, bool layer, int64_t rows, int64_t cols, DType dtype,
                          bool aligned, ParamGradPlan* plan) {
  return layer ? plan_backward<true>(op, rows, cols, dtype, aligned, plan)
               : plan_backward<false>(op, rows, cols, dtype, aligned, plan);
}

}  // namespace detail::rowwise

using namespace detail::rowwise;  // NOLINT(google-build-using-namespace): the norms' host side
using detail::check_float_dtype;
using detail::check_overlaps;
using detail::check_pointer;
using detail::matrix_region;
using detail::vector_region;

Status layer_norm(ConstMatrixRef x, const void* d_weight, const void* d_bias, MatrixRef y,
                  float* d_mean, float* d_rstd, int64_t rows, int64_t cols, float eps, DType dtype,
                  cudaStream_t stream) {
  constexpr const char* kOp = "layer_norm";
  if (Status s = check_shape(kOp, rows, cols); !s.ok()) return s;
  if (Status s = check_float_dtype(kOp, "dtype", dtype); !s.ok()) return s;
  if (Status s = check_eps(kOp, eps); !s.ok()) return s;
  const int64_t work = rows > 0 ? cols : 0;
  const int64_t stats = cols > 0 ? rows : 0;
  if (Status s = check_matrix(kOp, "x", x.data, x.row_stride, rows, cols, dtype); !s.ok()) return s;
  if (Status s = check_pointer(kOp, "weight", d_weight, work, dtype); !s.ok()) return s;
  if (Status s = check_pointer(kOp, "bias", d_bias, work, dtype); !s.ok()) return s;
  if (Status s = check_matrix(kOp, "y", y.data, y.row_stride, rows, cols, dtype); !s.ok()) return s;
  if (d_mean != nullptr) {
    if (Status s = check_pointer(kOp, "mean", d_mean, stats, DType::kFloat32); !s.ok()) return s;
  }
  if (d_rstd != nullptr) {
    if (Status s = check_pointer(kOp, "rstd", d_rstd, stats, DType::kFloat32); !s.ok()) return s;
  }
  if (rows == 0 || cols == 0) return Status();
  if (Status s =
          check_overlaps(kOp, {matrix_region("x", x.data, x.row_stride, rows, cols, dtype, false),
                               vector_region("weight", d_weight, cols, dtype, false),
                               vector_region("bias", d_bias, cols, dtype, false),
                               matrix_region("y", y.data, y.row_stride, rows, cols, dtype, true),
                               vector_region("mean", d_mean, rows, DType::kFloat32, true),
                               vector_region("rstd", d_rstd, rows, DType::kFloat32, true)});
      !s.ok())
    return s;
  const bool aligned = rows_aligned16(x.data, x.row_stride, dtype) &&
                       rows_aligned16(y.data, y.row_stride, dtype) && aligned16(d_weight) &&
                       aligned16(d_bias);
  const NormArgs<void> a{x.data,       x.row_stride, nullptr, 0,    d_weight, d_bias, y.data,
                         y.row_stride, d_mean,       d_rstd,  rows, cols,     eps};
  return launch_forward<Norm::kLayer>(kOp, a, aligned, dtype, stream);
}

Status rms_norm(ConstMatrixRef x, const void* d_weight, MatrixRef y, float* d_rstd, int64_t rows,
                int64_t cols, float eps, DType dtype, cudaStream_t stream) {
  constexpr const char* kOp = "rms_norm";
  if (Status s = check_shape(kOp, rows, cols); !s.ok()) return s;
  if (Status s = check_float_dtype(kOp, "dtype", dtype); !s.ok()) return s;
  if (Status s = check_eps(kOp, eps); !s.ok()) return s;
  const int64_t work = rows > 0 ? cols : 0;
  if (Status s = check_matrix(kOp, "x", x.data, x.row_stride, rows, cols, dtype); !s.ok()) return s;
  if (Status s = check_pointer(kOp, "weight", d_weight, work, dtype); !s.ok()) return s;
  if (Status s = check_matrix(kOp, "y", y.data, y.row_stride, rows, cols, dtype); !s.ok()) return s;
  if (d_rstd != nullptr) {
    if (Status s = check_pointer(kOp, "rstd", d_rstd, cols > 0 ? rows : 0, DType::kFloat32);
        !s.ok())
      return s;
  }
  if (rows == 0 || cols == 0) return Status();
  if (Status s =
          check_overlaps(kOp, {matrix_region("x", x.data, x.row_stride, rows, cols, dtype, false),
                               vector_region("weight", d_weight, cols, dtype, false),
                               matrix_region("y", y.data, y.row_stride, rows, cols, dtype, true),
                               vector_region("rstd", d_rstd, rows, DType::kFloat32, true)});
      !s.ok())
    return s;
  const bool aligned = rows_aligned16(x.data, x.row_stride, dtype) &&
                       rows_aligned16(y.data, y.row_stride, dtype) && aligned16(d_weight);
  const NormArgs<void> a{x.data,       x.row_stride, nullptr, 0,    d_weight, nullptr, y.data,
                         y.row_stride, nullptr,      d_rstd,  rows, cols,     eps};
  return launch_forward<Norm::kRms>(kOp, a, aligned, dtype, stream);
}

Status fused_add_rms_norm(MatrixRef x, MatrixRef residual, const void* d_weight, int64_t rows,
                          int64_t cols, float eps, DType dtype, cudaStream_t stream) {
  constexpr const char* kOp = "fused_add_rms_norm";
  if (Status s = check_shape(kOp, rows, cols); !s.ok()) return s;
  if (Status s = check_float_dtype(kOp, "dtype", dtype); !s.ok()) return s;
  if (Status s = check_eps(kOp, eps); !s.ok()) return s;
  const int64_t work = rows > 0 ? cols : 0;
  if (Status s = check_matrix(kOp, "x", x.data, x.row_stride, rows, cols, dtype); !s.ok()) return s;
  if (Status s =
          check_matrix(kOp, "residual", residual.data, residual.row_stride, rows, cols, dtype);
      !s.ok())
    return s;
  if (Status s = check_pointer(kOp, "weight", d_weight, work, dtype); !s.ok()) return s;
  if (rows == 0 || cols == 0) return Status();
  // x and residual are both read and written: they must be distinct.
  if (Status s = check_overlaps(
          kOp,
          {matrix_region("x", x.data, x.row_stride, rows, cols, dtype, true),
           matrix_region("residual", residual.data, residual.row_stride, rows, cols, dtype, true),
           vector_region("weight", d_weight, cols, dtype, false)});
      !s.ok())
    return s;
  const bool aligned = rows_aligned16(x.data, x.row_stride, dtype) &&
                       rows_aligned16(residual.data, residual.row_stride, dtype) &&
                       aligned16(d_weight);
  const NormArgs<void> a{x.data,   x.row_stride, residual.data, residual.row_stride,
                         d_weight, nullptr,      x.data,        x.row_stride,
                         nullptr,  nullptr,      rows,          cols,
                         eps};
  return launch_forward<Norm::kAddRms>(kOp, a, aligned, dtype, stream);
}

Status layer_norm_backward_workspace_size(const RowShape& shape, size_t* bytes) {
  return workspace_size<true>("layer_norm_backward_workspace_size", shape.rows, shape.cols,
                              shape.dtype, bytes);
}

Status rms_norm_backward_workspace_size(const RowShape& shape, size_t* bytes) {
  return workspace_size<false>("rms_norm_backward_workspace_size", shape.rows, shape.cols,
                               shape.dtype, bytes);
}

namespace {

Status check_backward_common(const char* op, ConstMatrixRef dy, ConstMatrixRef x,
                             const void* d_weight, const float* d_rstd, MatrixRef dx,
                             void* d_dweight, int64_t rows, int64_t cols, DType dtype) {
  if (Status s = check_shape(op, rows, cols); !s.ok()) return s;
  if (Status s = check_float_dtype(op, "dtype", dtype); !s.ok()) return s;
  const int64_t work = rows > 0 ? cols : 0;
  if (Status s = check_matrix(op, "dy", dy.data, dy.row_stride, rows, cols, dtype); !s.ok())
    return s;
  if (Status s = check_matrix(op, "x", x.data, x.row_stride, rows, cols, dtype); !s.ok()) return s;
  if (Status s = check_pointer(op, "weight", d_weight, work, dtype); !s.ok()) return s;
  if (Status s = check_pointer(op, "rstd", d_rstd, cols > 0 ? rows : 0, DType::kFloat32); !s.ok())
    return s;
  if (Status s = check_matrix(op, "dx", dx.data, dx.row_stride, rows, cols, dtype); !s.ok())
    return s;
  return check_pointer(op, "dweight", d_dweight, cols, dtype);
}

// The workspace as the caller sized it (the op uses a prefix of it): it is written.
detail::Region workspace_region(void* d_workspace, size_t workspace_bytes) {
  return detail::byte_region("workspace", d_workspace, workspace_bytes, true);
}

bool backward_aligned(ConstMatrixRef dy, ConstMatrixRef x, const void* d_weight, MatrixRef dx,
                      DType dtype) {
  return rows_aligned16(dy.data, dy.row_stride, dtype) &&
         rows_aligned16(x.data, x.row_stride, dtype) &&
         rows_aligned16(dx.data, dx.row_stride, dtype) && aligned16(d_weight);
}

}  // namespace

Status layer_norm_backward(const LayerNormBackwardArgs& args, const RowShape& shape,
                           Workspace workspace, cudaStream_t stream) {
  constexpr const char* kOp = "layer_norm_backward";
  const auto& [dy, x, d_weight, d_mean, d_rstd, dx, d_dweight, d_dbias] = args;
  const auto [rows, cols, dtype] = shape;
  const auto [d_workspace, workspace_bytes] = workspace;
  if (Status s =
          check_backward_common(kOp, dy, x, d_weight, d_rstd, dx, d_dweight, rows, cols, dtype);
      !s.ok())
    return s;
  if (Status s = check_pointer(kOp, "mean", d_mean, cols > 0 ? rows : 0, DType::kFloat32); !s.ok())
    return s;
  if (Status s = check_pointer(kOp, "dbias", d_dbias, cols, dtype); !s.ok()) return s;
  if (cols == 0) return Status();
  if (Status s = check_overlaps(
          kOp, {matrix_region("dy", dy.data, dy.row_stride, rows, cols, dtype, false),
                matrix_region("x", x.data, x.row_stride, rows, cols, dtype, false),
                vector_region("weight", d_weight, cols, dtype, false),
                vector_region("mean", d_mean, rows, DType::kFloat32, false),
                vector_region("rstd", d_rstd, rows, DType::kFloat32, false),
                matrix_region("dx", dx.data, dx.row_stride, rows, cols, dtype, true),
                vector_region("dweight", d_dweight, cols, dtype, true),
                vector_region("dbias", d_dbias, cols, dtype, true),
                workspace_region(d_workspace, workspace_bytes)});
      !s.ok())
    return s;
  const NormBackwardArgs<void> a{dy.data, dy.row_stride, x.data,  x.row_stride,  d_weight,
                                 d_mean,  d_rstd,        dx.data, dx.row_stride, nullptr,
                                 0,       rows,          cols};
  return launch_backward<true>(kOp, a, d_dweight, d_dbias, d_workspace, workspace_bytes,
                               backward_aligned(dy, x, d_weight, dx, dtype), dtype, stream);
}

Status rms_norm_backward(const RmsNormBackwardArgs& args, const RowShape& shape,
                         Workspace workspace, cudaStream_t stream) {
  constexpr const char* kOp = "rms_norm_backward";
  const auto& [dy, x, d_weight, d_rstd, dx, d_dweight] = args;
  const auto [rows, cols, dtype] = shape;
  const auto [d_workspace, workspace_bytes] = workspace;
  if (Status s =
          check_backward_common(kOp, dy, x, d_weight, d_rstd, dx, d_dweight, rows, cols, dtype);
      !s.ok())
    return s;
  if (cols == 0) return Status();
  if (Status s = check_overlaps(
          kOp, {matrix_region("dy", dy.data, dy.row_stride, rows, cols, dtype, false),
                matrix_region("x", x.data, x.row_stride, rows, cols, dtype, false),
                vector_region("weight", d_weight, cols, dtype, false),
                vector_region("rstd", d_rstd, rows, DType::kFloat32, false),
                matrix_region("dx", dx.data, dx.row_stride, rows, cols, dtype, true),
                vector_region("dweight", d_dweight, cols, dtype, true),
                workspace_region(d_workspace, workspace_bytes)});
      !s.ok())
    return s;
  const NormBackwardArgs<void> a{dy.data, dy.row_stride, x.data,  x.row_stride,  d_weight,
                                 nullptr, d_rstd,        dx.data, dx.row_stride, nullptr,
                                 0,       rows,          cols};
  return launch_backward<false>(kOp, a, d_dweight, nullptr, d_workspace, workspace_bytes,
                                backward_aligned(dy, x, d_weight, dx, dtype), dtype, stream);
}

}  // namespace cudaops
