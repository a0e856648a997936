#include "reference/topk.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace cudaops::ref {
namespace {

// -1, 0 or 1 as a is below, equal to or above b in the order NaN > +inf > ... > +0 > -0 > ...
int compare_rank(double a, double b) {
  const bool a_nan = std::isnan(a), b_nan = std::isnan(b);
  if (a_nan || b_nan) return a_nan == b_nan ? 0 : (a_nan ? 1 : -1);
  if (a < b) return -1;
  if (a > b) return 1;
  const bool a_neg = std::signbit(a), b_neg = std::signbit(b);  // +0 and -0
  return a_neg == b_neg ? 0 : (a_neg ? -1 : 1);
}

}  // namespace

bool topk_ranks_before(double a, int64_t ia, double b, int64_t ib, bool largest) {
  const int c = compare_rank(a, b);
  if (c != 0) return largest ? c > 0 : c < 0;
  return ia < ib;
}

TopkReference topk(const HostArray& x, RowShape shape, int64_t k, bool largest, bool sorted) {
  TopkReference result;
  result.values.reserve(static_cast<size_t>(shape.rows * k));
  result.indices.reserve(static_cast<size_t>(shape.rows * k));
  std::vector<double> row(static_cast<size_t>(shape.cols));
  std::vector<int64_t> order(static_cast<size_t>(shape.cols));
  for (int64_t r = 0; r < shape.rows; ++r) {
    for (int64_t c = 0; c < shape.cols; ++c)
      row[c] = x.get(r * shape.row_stride + c);
    std::iota(order.begin(), order.end(), int64_t{0});
    const auto before = [&](int64_t a, int64_t b) {
      return topk_ranks_before(row[a], a, row[b], b, largest);
    };
    std::partial_sort(order.begin(), order.begin() + k, order.end(), before);
    if (!sorted) std::sort(order.begin(), order.begin() + k);
    for (int64_t j = 0; j < k; ++j) {
      result.values.push_back(row[order[j]]);
      result.indices.push_back(order[j]);
    }
  }
  return result;
}

}  // namespace cudaops::ref
