#pragma once

// The norms' host interface: the public entry points (norm_api.cpp) check their arguments and pick
// the dtype; the kernels and their launches are built one dtype per translation unit
// (norm_forward_<dtype>.cu, norm_backward_<dtype>.cu), so that a build spreads over its cores.
#include <cuda_runtime_api.h>

#include <cstdint>

#include "cudaops/status.h"
#include "rowwise/rowwise_launch.h"

namespace cudaops::detail::rowwise {

enum class Norm { kLayer, kRms, kAddRms };

template <typename T>
struct NormArgs {
  const T* x;
  int64_t x_stride;
  T* residual;  // kAddRms: read, then overwritten with x + residual
  int64_t residual_stride;
  const T* weight;
  const T* bias;  // kLayer
  T* y;           // kAddRms: x itself
  int64_t y_stride;
  float* mean;  // kLayer; may be null
  float* rstd;  // may be null
  int64_t rows;
  int64_t cols;
  float eps;
};

// Backward. With x_hat = (x - mean) * rstd (mean = 0 for rmsnorm) and g = dy * weight:
//   dx = rstd * (g - mean(g) - x_hat * mean(g * x_hat))   (no mean(g) term for rmsnorm)
//   dweight = sum over rows of dy * x_hat, dbias = sum over rows of dy.
// Each unit (a warp or a block of the persistent grid) sums its rows' terms per column and
// writes them as its partial row; launch_reduce_partials adds the partial rows in order.
template <typename T>
struct NormBackwardArgs {
  const T* dy;
  int64_t dy_stride;
  const T* x;
  int64_t x_stride;
  const T* weight;
  const float* mean;  // layernorm
  const float* rstd;
  T* dx;
  int64_t dx_stride;
  float* partials;  // [accumulators][units][cols]
  int64_t units;
  int64_t rows;
  int64_t cols;
};

/// Launches the forward pass of kNorm over rows of T (its arguments checked, rows and cols > 0;
/// `aligned` when every row and parameter starts on a 16-byte boundary), or with `dry` not null
/// only says in *dry what it would launch.
template <Norm kNorm, typename T>
Status launch_norm_forward(const char* op, const NormArgs<void>& a, bool aligned,
                           cudaStream_t stream, RowPlan* dry);

/// The launch of a backward pass over rows x cols of T (both > 0) on a device of `limits`:
/// which kernel, its grid, and the workspace it needs.
template <bool kLayer, typename T>
Status plan_norm_backward(const char* op, int64_t rows, int64_t cols, bool aligned,
                          const DeviceLimits& limits, ParamGradPlan* plan);

/// Launches a backward pass's kernel as `plan` says, its partial rows into `partials`.
template <bool kLayer, typename T>
Status launch_norm_backward(const char* op, const NormBackwardArgs<void>& a,
                            const ParamGradPlan& plan, float* partials, bool aligned,
                            cudaStream_t stream);

/// The rung a forward norm (kind) takes for rows x cols of dtype (rowwise_plan).
Status plan_norm_forward(const char* op, Norm kind, int64_t rows, int64_t cols, DType dtype,
                         bool aligned, RowPlan* plan);

/// The plan of a norm's backward pass for rows x cols of dtype (rowwise_plan).
Status plan_norm_backward(const char* op, bool layer, int64_t rows, int64_t cols, DType dtype,
                          bool aligned, ParamGradPlan* plan);

}  // namespace cudaops::detail::rowwise
