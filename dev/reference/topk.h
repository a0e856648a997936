#pragma once

// The reference of top-k: an exact selection on the host, in the order topk documents (NaN above
// every number, -0.0 below +0.0, ties to the lower column).
#include <cstdint>
#include <vector>

#include "reference/host_array.h"
#include "reference/rowwise.h"

namespace cudaops::ref {

struct TopkReference {
  std::vector<double> values;    ///< rows x k, dense
  std::vector<int64_t> indices;  ///< rows x k, dense
};

/// True when a ranks before b among the largest (the reverse numeric order for the smallest),
/// a and b being the values at columns ia and ib.
bool topk_ranks_before(double a, int64_t ia, double b, int64_t ib, bool largest);

/// The top k of each row of x: in rank order when sorted, else in ascending column order.
TopkReference topk(const HostArray& x, RowShape shape, int64_t k, bool largest, bool sorted);

}  // namespace cudaops::ref
