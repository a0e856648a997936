// cudaops._core: the compiled part of the cudaops package.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "array.h"
#include "array_import.h"

#include "common.h"
#include "cudaops/version.h"
#include "ops.h"

namespace py = pybind11;

namespace cudaops::python {

namespace {

struct Family {
  const char* name;
  Binder bind;
};

// A function-local list: the families register from their sources' static initialisers.
std::vector<Family>& families() {
  static std::vector<Family> list;
  return list;
}

}  // namespace

bool register_binder(const char* name, Binder bind) {
  families().push_back({name, bind});
  return true;
}

void bind_ops(py::module_& m) {
  std::vector<Family> list = families();
  std::sort(list.begin(), list.end(),
            [](const Family& a, const Family& b) { return std::strcmp(a.name, b.name) < 0; });
  for (const Family& family : list)
    family.bind(m);
}

namespace {

void define_module(py::module_& m) {
  // Each docstring opens with its own signature ("name(args)\n--\n\n", CPython's convention for
  // builtins): help() and inspect.signature show the Python arguments, not pybind11's C++ types.
  py::options options;
  options.disable_function_signatures();
  m.doc() = "The compiled part of cudaops: array import, cudaops.Array and the ops.";
  py::register_exception<CudaError>(m, "CudaError", PyExc_RuntimeError);
  py::register_exception<CompileError>(m, "CompileError", PyExc_RuntimeError);
  m.attr("__version__") = cudaops::version_string();
  m.attr("cuda_architectures") = cudaops::build_cuda_architectures();
  m.attr("cuda_runtime_version") = cudaops::build_cuda_runtime_version();

  bind_array(m);
  bind_ops(m);

  m.def("_set_fast_paths", &set_fast_paths, py::arg("enabled"),
        "_set_fast_paths(enabled)\n--\n\n"
        "Read torch tensors and cudaops.Array directly (True, the default) or only through "
        "DLPack and __cuda_array_interface__ (False).");
  m.def("_fast_paths", &fast_paths, "_fast_paths()\n--\n\n");
  m.def("empty_cache", &empty_cache,
        "empty_cache()\n--\n\n"
        "Hands the memory that no cudaops array uses back to the driver, on every device. Memory "
        "of arrays freed while work on them is still queued is handed back by a later call.");
  m.def(
      "memory_reserved",
      [](std::optional<int> device) {
        int dev = 0;
        if (!device) {
          check_cuda(cudaGetDevice(&dev), "cudaops.memory_reserved: CUDA is not available");
        } else if (*device < 0) {
          throw py::value_error("cudaops.memory_reserved: device: expected an index >= 0, got " +
                                std::to_string(*device));
        } else {
          dev = *device;
        }
        return memory_reserved(dev);
      },
      py::arg("device") = py::none(),
      "memory_reserved(device=None)\n--\n\n"
      "Bytes that cudaops's memory pool of `device` (default: the current one) holds from the "
      "driver, in use by arrays or kept for the next ones.");
  m.def(
      "device_count",
      []() {
        int count = 0;
        if (cudaGetDeviceCount(&count) != cudaSuccess) {
          (void)cudaGetLastError();
          return 0;
        }
        return count;
      },
      "device_count()\n--\n\n"
      "Number of usable CUDA devices; 0 without a GPU or a driver (never raises).");
}

}  // namespace
}  // namespace cudaops::python

PYBIND11_MODULE(_core, m) {
  cudaops::python::define_module(m);
}
