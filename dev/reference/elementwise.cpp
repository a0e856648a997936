#include "reference/elementwise.h"

namespace cudaops::ref {

std::vector<double> add(const HostArray& a, const HostArray& b) {
  std::vector<double> out(static_cast<size_t>(a.size()));
  for (int64_t i = 0; i < a.size(); ++i)
    out[static_cast<size_t>(i)] = a.get(i) + b.get(i);
  return out;
}

std::vector<double> add_scalar(const HostArray& a, float alpha) {
  std::vector<double> out(static_cast<size_t>(a.size()));
  for (int64_t i = 0; i < a.size(); ++i) {
    out[static_cast<size_t>(i)] = a.get(i) + static_cast<double>(alpha);
  }
  return out;
}

}  // namespace cudaops::ref
