// An array seen as a matrix of rows along its last axis, shared by the row-wise ops and topk.
#pragma once

#include "array_import.h"

namespace cudaops::python {

/// An array seen as rows x cols along its last axis.
struct Rows {
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t stride = 0;  // elements between rows
};

/// The last axis must be contiguous and the leading axes must collapse into one axis of rows
/// (as for a slice of a larger matrix's columns). Axes of extent 1 may have any stride.
Rows rows_of(const CallContext& ctx, const ArrayView& v);

}  // namespace cudaops::python
