#pragma once

// The reference of attention_merge, in double precision on the host.
#include <cstdint>
#include <vector>

#include "reference/host_array.h"

namespace cudaops::ref {

/// outs [parts, rows, dim] and lses [parts, rows] merged: out [rows, dim] and lse [rows]
/// (log of the sum of exp(lse_p); a part at -inf weighs nothing; every part -inf: zeros, -inf).
void attention_merge(const HostArray& outs, const std::vector<double>& lses, int64_t parts,
                     int64_t rows, int64_t dim, std::vector<double>* out, std::vector<double>* lse);

}  // namespace cudaops::ref
