#pragma once

#include <cstddef>
#include <cstdint>

#include "cudaops/dtype.h"
#include "cudaops/export.h"
#include "cudaops/status.h"
#include "cudaops/stream.h"
#include "cudaops/types.h"

namespace cudaops {

// Row-wise top-k: the k largest (or smallest) elements of each row of a rows x cols matrix, with
// their column indices.
//
// - x is float32, float16 or bfloat16; values are written in the same dtype, indices as int64
//   or int32. Row r of each matrix starts at data + r * row_stride elements (x's row_stride >=
//   cols; values' and indices' row_stride >= k); the last axis is contiguous.
// - 1 <= k <= min(cols, kTopkMaxK) and cols <= kTopkMaxCols.
// - Order: numbers in their usual order, -0.0 below +0.0, and NaN above every number (+inf
//   included), as torch.topk ranks them. Elements that compare equal (NaNs included) are
//   ranked by column: the lower index first. The selection is therefore unique and the result
//   deterministic, bit for bit.
// - sorted: the k results in rank order (descending for largest, ascending for smallest; NaNs
//   first for largest, last for smallest); otherwise in ascending column order.
// - Rows with more than kTopkTileCols elements are cut into tiles selected in parallel and need
//   a workspace: topk_workspace_size() says how much (0 otherwise).
// - values, indices and the workspace must not overlap x or one another (kInvalidArgument).
// - rows == 0 launches nothing and succeeds. Asynchronous on `stream`; nothing is allocated or
//   synchronised, so calls can be captured in a CUDA graph.
//
// Returns kInvalidArgument (k out of range, cols > kTopkMaxCols, a negative size, a row stride
// too small, a null pointer with work to do), kMisaligned, kUnsupportedDtype (x's dtype, or an
// index dtype other than int32/int64), kWorkspaceTooSmall, or kCudaError.

inline constexpr int64_t kTopkMaxK = 4096;
inline constexpr int64_t kTopkMaxCols = int64_t{1} << 24;
/// Longest row selected by one thread block, with no workspace.
inline constexpr int64_t kTopkTileCols = 16384;

struct TopkOptions {
  bool largest = true;                ///< the k largest (else the k smallest)
  bool sorted = true;                 ///< in rank order (else in ascending column order)
  DType index_dtype = DType::kInt64;  ///< kInt64 or kInt32
};

/// What topk reads and writes: x (shape.rows x shape.cols of shape.dtype), values (rows x k,
/// shape.dtype) and indices (rows x k, options.index_dtype).
struct TopkArgs {
  ConstMatrixRef x{};
  MatrixRef values{};
  MatrixRef indices{};
  int64_t k = 0;
  TopkOptions options{};
};

/// Bytes of workspace topk needs for this shape and k (0 when every row fits one tile).
CUDAOPS_EXPORT Status topk_workspace_size(const RowShape& shape, int64_t k, size_t* bytes);

/// The top k of each row of args.x; `workspace` holds topk_workspace_size bytes.
CUDAOPS_EXPORT Status topk(const TopkArgs& args, const RowShape& shape, Workspace workspace,
                           cudaStream_t stream);

/// Bytes of workspace topk needs for this problem (0 when every row fits one tile).
CUDAOPS_EXPORT Status topk_workspace_size(int64_t rows, int64_t cols, int64_t k, DType dtype,
                                          size_t* bytes);

/// values (rows x k, dtype) and indices (rows x k, options.index_dtype) of the top k of each row
/// of x. d_workspace must hold topk_workspace_size bytes, 16-byte aligned (it may be null when
/// that size is 0).
CUDAOPS_EXPORT Status topk(ConstMatrixRef x, MatrixRef values, MatrixRef indices, int64_t rows,
                           int64_t cols, int64_t k, DType dtype, const TopkOptions& options,
                           void* d_workspace, size_t workspace_bytes, cudaStream_t stream);

}  // namespace cudaops
