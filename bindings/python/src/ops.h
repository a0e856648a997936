// The op families' bindings: each ops/<family>.cpp registers its binder next to it
// (CUDAOPS_PYTHON_OPS), so that adding a family edits no central list; the module calls every
// binder, in name order, once cudaops.Array is bound.
#pragma once

#include "common.h"

namespace cudaops::python {

using Binder = void (*)(py::module_& m);

/// Adds `bind` as family `name`'s binder; returns true (for a static initialiser).
bool register_binder(const char* name, Binder bind);

/// Calls every registered binder on `m`, in name order.
void bind_ops(py::module_& m);

}  // namespace cudaops::python

/// Registers FN (void FN(py::module_&)) as the binder of family NAME. Once per source, at
/// namespace scope.
#define CUDAOPS_PYTHON_OPS(NAME, FN)                                  \
  [[maybe_unused]] static const bool cudaops_python_ops_registered_ = \
      ::cudaops::python::register_binder(NAME, FN)
