// The parts of array_import.cpp's converter, each in its own file: the dtype and device maps of
// the protocols (import_types.cpp), direct reads of torch tensors and CuPy arrays
// (import_frameworks.cpp) and the protocols' importers (import_protocols.cpp).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include "array_import.h"

namespace cudaops::python::detail {

/// "op: name: ", the start of every message about an argument.
/// The most dimensions an imported array may have: a producer's ndim is not trusted beyond it.
inline constexpr int kMaxDims = 64;

inline std::string prefix(const char* op, const std::string& name) {
  return std::string(op) + ": " + name + ": ";
}

inline std::string pointer_text(const void* ptr) {
  std::ostringstream text;
  text << "0x" << std::hex << reinterpret_cast<uintptr_t>(ptr);
  return text.str();
}

// ---- import_types.cpp ------------------------------------------------------------------------

/// Throws unless a DLPack device type is CUDA memory the ops can use.
void require_cuda_device_type(int32_t type, const char* op, const std::string& name);
/// The view's element type from a DLPack dtype (Elements::kAny: any whole number of bytes).
void set_dl_type(ArrayView& view, dl::DataType t, Elements elements, const char* op);
/// The view's element type from a __cuda_array_interface__ typestr.
void set_typestr(ArrayView& view, const std::string& typestr, Elements elements, const char* op);
/// A Python int that fits int64 (not a bool), else a TypeError or ValueError naming `what`.
int64_t as_int(py::handle value, const char* op, const std::string& name, const char* what);
/// A tuple or list of such ints.
std::vector<int64_t> int_tuple(py::handle value, const char* op, const std::string& name,
                               const char* what);

// ---- import_frameworks.cpp -------------------------------------------------------------------

/// Whether obj is a torch.Tensor (or Parameter) of an imported torch that looks as expected.
bool is_plain_torch_tensor(py::handle obj);
/// Fills `view` from a torch tensor's attributes; false when the protocols must report it.
bool read_torch_tensor(py::handle obj, ArrayView& view);
/// Whether obj is a cupy.ndarray of an imported CuPy.
bool is_cupy_ndarray(py::handle obj);
/// Fills `view` from a CuPy array's attributes; false when the protocols must report it.
bool read_cupy_array(py::handle obj, ArrayView& view);
/// A new C-contiguous CuPy array of shape x dtype from CuPy's allocator, on the current device and
/// CuPy's current stream, and its data pointer; None where CuPy has no such dtype.
py::object cupy_empty(const std::vector<int64_t>& shape, DType dtype, void** data);
/// The current stream of CuPy, and of torch on `device`.
cudaStream_t cupy_current_stream();
cudaStream_t torch_current_stream(int device);

// ---- import_protocols.cpp --------------------------------------------------------------------

/// The type's DLPack C exchange API, or null.
const dl::ExchangeAPI* exchange_api_of(py::handle obj);
/// Imports through the C exchange API; false (no Python error) when the producer declines.
bool import_exchange(py::handle obj, const dl::ExchangeAPI* api, ArrayView& view, Access access,
                     Elements elements, const char* op);
/// Imports through __dlpack__ (versioned capsules first, then legacy ones).
void import_dlpack(py::handle obj, ArrayView& view, cudaStream_t stream, Elements elements,
                   const char* op);
/// Imports through __cuda_array_interface__ (v2, v3).
void import_cai(py::handle obj, ArrayView& view, Elements elements, const char* op);

}  // namespace cudaops::python::detail
