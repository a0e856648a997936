#include "reference/compare.h"

#include <cmath>
#include <cstdio>
#include <limits>

namespace cudaops::ref {

Tolerance rounding_tolerance(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return {0x1.0p-23, 0x1.0p-126};
    case DType::kFloat16:
      return {0x1.0p-10, 0x1.0p-14};
    case DType::kBFloat16:
      return {0x1.0p-7, 0x1.0p-126};
    case DType::kInt32:
    case DType::kInt64:
      return {0.0, 1.0};
  }
  return {};
}

namespace {

double element_error(double got, double want, const Tolerance& tolerance) {
  if (std::isnan(want)) return std::isnan(got) ? 0.0 : std::numeric_limits<double>::infinity();
  if (std::isinf(want)) return got == want ? 0.0 : std::numeric_limits<double>::infinity();
  if (!std::isfinite(got)) return std::numeric_limits<double>::infinity();
  return std::fabs(got - want) / std::fmax(std::fabs(want), tolerance.floor);
}

}  // namespace

CompareResult compare(const HostArray& got, const std::vector<double>& want, Tolerance tolerance) {
  CompareResult result;
  result.tolerance = tolerance;
  result.count = got.size();
  if (static_cast<int64_t>(want.size()) != got.size()) {
    result.size_mismatch = true;
    result.max_error = std::numeric_limits<double>::infinity();
    return result;
  }
  for (int64_t i = 0; i < got.size(); ++i) {
    const double g = got.get(i);
    const double w = want[static_cast<size_t>(i)];
    const double error = element_error(g, w, tolerance);
    if (error > result.max_error || (result.worst_index < 0 && error == result.max_error)) {
      result.max_error = error;
      result.worst_index = i;
    }
    if (!(error <= tolerance.rel)) {
      if (result.mismatches == 0) {
        result.first_mismatch = i;
        result.got_at_first = g;
        result.want_at_first = w;
      }
      ++result.mismatches;
    }
  }
  return result;
}

std::string CompareResult::describe() const {
  char line[256];
  if (size_mismatch) return "FAILED: result and reference differ in length";
  if (ok()) {
    std::snprintf(line, sizeof line, "ok: max relative error %.3g <= %.3g over %lld elements",
                  max_error, tolerance.rel, static_cast<long long>(count));
  } else {
    std::snprintf(line, sizeof line,
                  "FAILED: %lld of %lld elements over tolerance %.3g; first at index %lld: got "
                  "%.9g, expected %.9g; max relative error %.3g",
                  static_cast<long long>(mismatches), static_cast<long long>(count), tolerance.rel,
                  static_cast<long long>(first_mismatch), got_at_first, want_at_first, max_error);
  }
  return line;
}

}  // namespace cudaops::ref
