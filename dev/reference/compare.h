#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cudaops/dtype.h"
#include "reference/host_array.h"

namespace cudaops::ref {

/// Error allowed between a result and its double-precision reference:
/// |got - want| <= rel * max(|want|, floor) for every element.
struct Tolerance {
  double rel = 0.0;    ///< relative error allowed
  double floor = 0.0;  ///< below this magnitude the error is judged against floor (absolute)
};

/// One unit in the last place of the dtype as relative error, with the dtype's smallest normal
/// as floor: what a result rounded once from an exact value (or a float32 one) must meet.
Tolerance rounding_tolerance(DType dtype);

struct CompareResult {
  int64_t count = 0;            ///< elements compared
  int64_t mismatches = 0;       ///< elements over tolerance (NaN where a number is due, ...)
  double max_error = 0.0;       ///< largest |got - want| / max(|want|, floor); inf for a mismatch
  int64_t worst_index = -1;     ///< where max_error was found
  int64_t first_mismatch = -1;  ///< first index over tolerance
  double got_at_first = 0.0;
  double want_at_first = 0.0;
  Tolerance tolerance;
  bool size_mismatch = false;  ///< result and reference differ in length; nothing compared

  bool ok() const { return mismatches == 0 && !size_mismatch; }
  /// One line: "ok: max error 1.2e-08 <= 1.2e-07 over 4096 elements" or the first mismatch.
  std::string describe() const;
};

/// Compares got[i] with want[i]: NaN must meet NaN, an infinity the same infinity, and finite
/// values the tolerance.
CompareResult compare(const HostArray& got, const std::vector<double>& want, Tolerance tolerance);

}  // namespace cudaops::ref
