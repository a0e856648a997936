#pragma once

#include <cstddef>
#include <cstdint>

#include "cudaops/dtype.h"
#include "cudaops/export.h"
#include "cudaops/status.h"
#include "cudaops/stream.h"
#include "cudaops/types.h"

namespace cudaops {

// Row-wise operators over a rows x cols matrix, along the last axis: softmax, layernorm, rmsnorm
// (forward and backward) and fused residual-add + rmsnorm.
//
// - Matrices are given as a pointer and a row stride in elements: row r starts at
//   data + r * row_stride, and its cols elements are contiguous (row_stride >= cols). Each matrix
//   argument has its own stride, so rows of a larger matrix can be read or written in place.
// - dtype (kFloat32, kFloat16 or kBFloat16) is that of every matrix, weight, bias and parameter
//   gradient; mean and rstd are float32. All arithmetic is done in float32.
// - Rows whose start is 16-byte aligned (pointer and row stride) take the vectorised kernels; any
//   other alignment of the element size takes a slower path with the same results.
// - An output may be the same matrix as an input of the same call (same pointer, same stride):
//   each element is read before it is written. Any other overlap of an output with another
//   argument is refused (kInvalidArgument); column blocks side by side in one buffer (x = buf[:,
//   :c], y = buf[:, c:]) do not overlap.
// - rows == 0 or cols == 0 launches nothing (but for the parameter gradients of the backward
//   passes, which are then zeros when cols > 0) and succeeds.
// - Asynchronous on `stream`; nothing is allocated or synchronised, so calls can be captured in a
//   CUDA graph. The backward passes of the norms take a caller-provided workspace, sized by their
//   *_workspace_size query for the current device.
// - The parameter gradients are deterministic: the same call on the same device gives the same
//   bits every time (fixed partition of the rows, fixed order of every sum, no atomics).
//
// Returns kInvalidArgument (null pointer with work to do, negative size, row_stride < cols,
// eps <= 0 or NaN), kMisaligned (a pointer not aligned to its element), kUnsupportedDtype,
// kWorkspaceTooSmall, or kCudaError when a launch fails.

// Each op takes its arguments as a struct (aggregate, documented defaults) with the problem's
// RowShape, as the backward passes below do; the positional forms after them are the same calls.

/// softmax: y = exp(x - max(x)) / sum(exp(x - max(x))) along each row (all -inf gives NaN).
struct SoftmaxArgs {
  ConstMatrixRef x{};
  MatrixRef y{};  ///< may be x itself
};
CUDAOPS_EXPORT Status softmax(const SoftmaxArgs& args, const RowShape& shape, cudaStream_t stream);

/// softmax_backward: dx = y * (dy - sum(dy * y)) along each row, y being softmax's output.
struct SoftmaxBackwardArgs {
  ConstMatrixRef y{};
  ConstMatrixRef dy{};
  MatrixRef dx{};  ///< may be y or dy itself
};
CUDAOPS_EXPORT Status softmax_backward(const SoftmaxBackwardArgs& args, const RowShape& shape,
                                       cudaStream_t stream);

/// layer_norm: y = (x - mean) * rstd * weight + bias, rstd = 1 / sqrt(var + eps).
struct LayerNormArgs {
  ConstMatrixRef x{};
  const void* d_weight = nullptr;  ///< cols elements
  const void* d_bias = nullptr;    ///< cols elements
  MatrixRef y{};                   ///< may be x itself
  float* d_mean = nullptr;         ///< rows float32, or null
  float* d_rstd = nullptr;         ///< rows float32, or null
  float eps = 1e-5f;
};
CUDAOPS_EXPORT Status layer_norm(const LayerNormArgs& args, const RowShape& shape,
                                 cudaStream_t stream);

/// rms_norm: y = x * rstd * weight, rstd = 1 / sqrt(mean(x^2) + eps).
struct RmsNormArgs {
  ConstMatrixRef x{};
  const void* d_weight = nullptr;  ///< cols elements
  MatrixRef y{};                   ///< may be x itself
  float* d_rstd = nullptr;         ///< rows float32, or null
  float eps = 1e-6f;
};
CUDAOPS_EXPORT Status rms_norm(const RmsNormArgs& args, const RowShape& shape, cudaStream_t stream);

/// fused_add_rms_norm, in place: residual = x + residual, then x = rms_norm(residual) * weight.
struct FusedAddRmsNormArgs {
  MatrixRef x{};
  MatrixRef residual{};
  const void* d_weight = nullptr;  ///< cols elements
  float eps = 1e-6f;
};
CUDAOPS_EXPORT Status fused_add_rms_norm(const FusedAddRmsNormArgs& args, const RowShape& shape,
                                         cudaStream_t stream);

/// y = exp(x - max(x)) / sum(exp(x - max(x))) along each row. A row of all -inf gives NaN.
CUDAOPS_EXPORT Status softmax(ConstMatrixRef x, MatrixRef y, int64_t rows, int64_t cols,
                              DType dtype, cudaStream_t stream);

/// dx = y * (dy - sum(dy * y)) along each row, y being softmax's output.
CUDAOPS_EXPORT Status softmax_backward(ConstMatrixRef y, ConstMatrixRef dy, MatrixRef dx,
                                       int64_t rows, int64_t cols, DType dtype,
                                       cudaStream_t stream);

/// y = (x - mean) * rstd * weight + bias, with mean and the biased variance var of each row and
/// rstd = 1 / sqrt(var + eps). weight and bias hold cols elements. d_mean and d_rstd (rows
/// float32 each) receive the statistics when not null.
CUDAOPS_EXPORT Status layer_norm(ConstMatrixRef x, const void* d_weight, const void* d_bias,
                                 MatrixRef y, float* d_mean, float* d_rstd, int64_t rows,
                                 int64_t cols, float eps, DType dtype, cudaStream_t stream);

/// y = x * rstd * weight with rstd = 1 / sqrt(mean(x^2) + eps) per row. d_rstd (rows float32)
/// receives rstd when not null.
CUDAOPS_EXPORT Status rms_norm(ConstMatrixRef x, const void* d_weight, MatrixRef y, float* d_rstd,
                               int64_t rows, int64_t cols, float eps, DType dtype,
                               cudaStream_t stream);

/// In place, as in a transformer block: residual = x + residual (rounded to dtype), then
/// x = residual * rstd * weight with the rmsnorm of the stored residual.
CUDAOPS_EXPORT Status fused_add_rms_norm(MatrixRef x, MatrixRef residual, const void* d_weight,
                                         int64_t rows, int64_t cols, float eps, DType dtype,
                                         cudaStream_t stream);

/// What layer_norm_backward reads and writes. Matrices are rows x cols, vectors of weights and
/// their gradients cols elements in dtype, mean and rstd rows float32 values.
struct LayerNormBackwardArgs {
  ConstMatrixRef dy;               ///< the gradient of layer_norm's output
  ConstMatrixRef x;                ///< layer_norm's input
  const void* d_weight = nullptr;  ///< layer_norm's weight
  const float* d_mean = nullptr;   ///< layer_norm's mean of each row
  const float* d_rstd = nullptr;   ///< layer_norm's rstd of each row
  MatrixRef dx;                    ///< the gradient of x (may be dy itself)
  void* d_dweight = nullptr;       ///< the gradient of weight
  void* d_dbias = nullptr;         ///< the gradient of bias
};

/// Bytes of workspace layer_norm_backward needs on the current device for this problem.
CUDAOPS_EXPORT Status layer_norm_backward_workspace_size(const RowShape& shape, size_t* bytes);

/// Gradients of layer_norm given its mean and rstd: dx, dweight and dbias. `workspace` holds
/// layer_norm_backward_workspace_size bytes.
CUDAOPS_EXPORT Status layer_norm_backward(const LayerNormBackwardArgs& args, const RowShape& shape,
                                          Workspace workspace, cudaStream_t stream);

/// What rms_norm_backward reads and writes (as LayerNormBackwardArgs, without mean and bias).
struct RmsNormBackwardArgs {
  ConstMatrixRef dy;               ///< the gradient of rms_norm's output
  ConstMatrixRef x;                ///< rms_norm's input
  const void* d_weight = nullptr;  ///< rms_norm's weight
  const float* d_rstd = nullptr;   ///< rms_norm's rstd of each row
  MatrixRef dx;                    ///< the gradient of x (may be dy itself)
  void* d_dweight = nullptr;       ///< the gradient of weight
};

/// Bytes of workspace rms_norm_backward needs on the current device for this problem.
CUDAOPS_EXPORT Status rms_norm_backward_workspace_size(const RowShape& shape, size_t* bytes);

/// Gradients of rms_norm given its rstd: dx and dweight. `workspace` holds
/// rms_norm_backward_workspace_size bytes.
CUDAOPS_EXPORT Status rms_norm_backward(const RmsNormBackwardArgs& args, const RowShape& shape,
                                        Workspace workspace, cudaStream_t stream);

/// The row-wise ops, as rowwise_plan names them.
enum class RowwiseOp {
  kSoftmax,
  kSoftmaxBackward,
  kLayerNorm,
  kLayerNormBackward,
  kRmsNorm,
  kRmsNormBackward,
  kFusedAddRmsNorm,
};

/// Which kernel a row-wise op takes for a shape, and how it is launched.
struct RowwisePlan {
  /// "cached" (a row held in registers), "split" (a row over the blocks of a thread-block
  /// cluster), "split_rows" (several rows per cluster at once), "pipelined" (rows staged in shared
  /// memory by a persistent grid), "streamed" (a row walked in chunks), "long" (the norms'
  /// backward passes over rows too long to split), or "none" (rows or cols is 0: no launch).
  const char* path = "none";
  int block_threads = 0;       ///< threads per block
  int row_threads = 0;         ///< threads of a block that share one row
  int chunks = 0;              ///< 16-byte chunks per thread (cached and split kernels)
  int blocks_per_row = 1;      ///< blocks of a cluster that share one row
  int64_t blocks = 0;          ///< blocks launched (the backward passes: without the final sums)
  size_t smem_bytes = 0;       ///< dynamic shared memory per block
  size_t workspace_bytes = 0;  ///< workspace of the norms' backward passes
};

/// What `op` would launch for rows x cols of dtype on the current device, with every matrix
/// 16-byte aligned (rows and parameters) or not: the same choice the op makes, with nothing
/// launched. Where the choice depends on the device (rows too long for a block), it is asked, and
/// kCudaError says that there is none.
CUDAOPS_EXPORT Status rowwise_plan(RowwiseOp op, int64_t rows, int64_t cols, DType dtype,
                                   bool aligned, RowwisePlan* plan);

}  // namespace cudaops
