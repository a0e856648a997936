#pragma once

#include <cstdint>

#include "cudaops/dtype.h"
#include "cudaops/export.h"
#include "cudaops/status.h"
#include "cudaops/stream.h"

namespace cudaops {

// Elementwise arithmetic on contiguous device arrays of `num_items` elements.
//
// - dtype: kFloat32, kFloat16 or kBFloat16. The arithmetic is done in float32 and the result is
//   rounded once to dtype.
// - d_out may equal an input (in place); any other overlap with an input is refused
//   (kInvalidArgument).
// - Each pointer must be aligned to the element size; 16-byte alignment of all of them (or the
//   same misalignment for all) gives the vectorised path, any other alignment a slower scalar one.
// - num_items == 0 launches nothing and succeeds, whatever the pointers.
// - Asynchronous on `stream`; nothing is allocated or synchronised, so calls can be captured in a
//   CUDA graph.
//
// Returns kInvalidArgument (null pointer with num_items > 0, num_items < 0), kMisaligned,
// kUnsupportedDtype, or kCudaError when the launch fails.

/// d_out[i] = d_a[i] + d_b[i]
CUDAOPS_EXPORT Status add(const void* d_a, const void* d_b, void* d_out, int64_t num_items,
                          DType dtype, cudaStream_t stream);

/// d_out[i] = d_a[i] + alpha, with alpha taken as float32.
CUDAOPS_EXPORT Status add_scalar(const void* d_a, float alpha, void* d_out, int64_t num_items,
                                 DType dtype, cudaStream_t stream);

}  // namespace cudaops
