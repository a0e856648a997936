#include "rows.h"

#include <sstream>
#include <string>

namespace cudaops::python {

Rows rows_of(const CallContext& ctx, const ArrayView& v) {
  if (v.shape.empty()) {
    throw py::value_error(std::string(ctx.op()) + ": " + v.name +
                          ": expected at least one dimension, got a 0-d array");
  }
  const size_t last = v.shape.size() - 1;
  Rows r;
  r.cols = v.shape[last];
  r.rows = 1;
  for (size_t i = 0; i < last; ++i)
    r.rows *= v.shape[i];
  r.stride = r.cols;
  bool ok = v.shape[last] <= 1 || v.strides[last] == 1;
  // Walk the leading axes from the innermost: each must step by the one inside it times its
  // extent (ignoring extent-1 axes).
  int64_t expected = -1;  // stride the next outer axis must have; -1 before the first
  for (size_t k = last; k-- > 0;) {
    if (v.shape[k] == 1) continue;
    if (expected < 0) {
      r.stride = v.strides[k];
      ok = ok && r.stride >= r.cols;
    } else {
      ok = ok && v.strides[k] == expected;
    }
    expected = v.strides[k] * v.shape[k];
  }
  if (r.rows <= 1) r.stride = r.cols;
  if (!ok) {
    std::ostringstream text;
    text << ctx.op() << ": " << v.name
         << ": expected the last axis contiguous and the leading axes evenly spaced rows, got "
            "shape "
         << shape_text(v.shape) << " with strides " << shape_text(v.strides) << " (in elements)";
    throw py::value_error(text.str());
  }
  return r;
}

}  // namespace cudaops::python
