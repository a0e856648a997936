#pragma once

#include <cstddef>
#include <cstdint>

#include "cudaops/dtype.h"

namespace cudaops {

// The types the row-wise families (rowwise.h, topk.h) share: matrices given as a pointer and a
// row stride, a problem's shape, and the caller's workspace.

/// A read-only matrix: row r at `data` + r * `row_stride` elements.
struct ConstMatrixRef {
  const void* data = nullptr;
  int64_t row_stride = 0;
};

/// A writable matrix: row r at `data` + r * `row_stride` elements.
struct MatrixRef {
  void* data = nullptr;
  int64_t row_stride = 0;
};

/// The shape of a row-wise problem: rows x cols elements of dtype.
struct RowShape {
  int64_t rows = 0;
  int64_t cols = 0;
  DType dtype = DType::kFloat32;
};

/// Scratch device memory the caller provides to an op: `bytes` bytes at `data`, 16-byte aligned,
/// sized by the op's *_workspace_size query (data may be null when that size is 0).
struct Workspace {
  void* data = nullptr;
  size_t bytes = 0;
};

}  // namespace cudaops
