#pragma once

#include <cstdint>

#include "cudaops/dtype.h"
#include "cudaops/export.h"
#include "cudaops/status.h"
#include "cudaops/stream.h"

namespace cudaops {

// The exact merge of partial attentions (flash-decoding's rule): `parts` attentions of the same
// queries over disjoint sets of tokens, each an output row o_p [dim] and its log-sum-exp l_p (the
// natural log of its softmax denominator with the scores' maximum added back, as ivf_attention
// returns it), merge into the attention over all the tokens:
//   l = log(sum_p exp(l_p)),  o = sum_p exp(l_p - l) o_p,
// a part with l_p = -inf (it attended to nothing) weighing nothing; every part -inf gives a zero
// row and l = -inf. float32 arithmetic, the parts added in order (the same bits every run).
// Asynchronous on `stream`; nothing is allocated or synchronised.

/// d_outs [parts, rows, dim] in dtype (float32, float16, bfloat16) and d_lses [parts, rows]
/// float32 (device, contiguous) into d_out [rows, dim] in dtype and, unless null, d_lse [rows]
/// float32. The outputs may not overlap the inputs. Returns kInvalidArgument (null pointers with
/// work to do, negative sizes, overlaps), kMisaligned, kUnsupportedDtype or kCudaError.
CUDAOPS_EXPORT Status attention_merge(const void* d_outs, const float* d_lses, void* d_out,
                                      float* d_lse, int64_t parts, int64_t rows, int64_t dim,
                                      DType dtype, cudaStream_t stream);

}  // namespace cudaops
