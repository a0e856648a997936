#include "reference/attention.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace cudaops::ref {

void attention_merge(const HostArray& outs, const std::vector<double>& lses, int64_t parts,
                     int64_t rows, int64_t dim, std::vector<double>* out,
                     std::vector<double>* lse) {
  const double inf = std::numeric_limits<double>::infinity();
  out->assign(static_cast<size_t>(rows * dim), 0.0);
  lse->assign(static_cast<size_t>(rows), -inf);
  for (int64_t r = 0; r < rows; ++r) {
    double m = -inf;
    for (int64_t p = 0; p < parts; ++p)
      m = std::max(m, lses[static_cast<size_t>(p * rows + r)]);
    if (m == -inf) continue;
    double sum = 0.0;
    for (int64_t p = 0; p < parts; ++p)
      sum += std::exp(lses[static_cast<size_t>(p * rows + r)] - m);
    for (int64_t e = 0; e < dim; ++e) {
      double acc = 0.0;
      for (int64_t p = 0; p < parts; ++p) {
        acc += std::exp(lses[static_cast<size_t>(p * rows + r)] - m) *
               outs.get((p * rows + r) * dim + e);
      }
      (*out)[static_cast<size_t>(r * dim + e)] = acc / sum;
    }
    (*lse)[static_cast<size_t>(r)] = m + std::log(sum);
  }
}

}  // namespace cudaops::ref
