// One binding function per op family, each in ops/<family>.cpp.
#pragma once

#include "common.h"

namespace cudaops::python {

void bind_elementwise(py::module_& m);
void bind_rowwise(py::module_& m);
void bind_jit(py::module_& m);
void bind_topk(py::module_& m);
void bind_kmeans(py::module_& m);
void bind_ivf(py::module_& m);

}  // namespace cudaops::python
