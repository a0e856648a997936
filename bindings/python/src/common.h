// Shared pieces of the Python binding: errors, the current-device guard and stream arguments.
#pragma once

#include <cuda_runtime_api.h>
#include <pybind11/pybind11.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "cudaops/status.h"

namespace cudaops::python {

namespace py = pybind11;

/// Raised as cudaops.CudaError (a RuntimeError): the CUDA runtime failed or is unavailable.
class CudaError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// Raised as cudaops.jit.CompileError (a RuntimeError): NVRTC rejected the source; the message
/// holds its log.
class CompileError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// Turns a failed status into the Python exception for its code, with the library's message.
[[noreturn]] void throw_status(const Status& status);

inline void check(const Status& status) {
  if (!status.ok()) throw_status(status);
}

/// Throws CudaError "<context>: <error name>: <description>" unless error is cudaSuccess. The
/// runtime's sticky last error is cleared first so that a later call does not report it again.
void check_cuda(cudaError_t error, const std::string& context);

/// check_cuda with the context "<op><what>", put together only on failure (for the hot path).
inline void check_cuda(cudaError_t error, const char* op, const char* what) {
  if (error != cudaSuccess) check_cuda(error, std::string(op) + what);
}

/// Makes `device` current for its lifetime and restores the caller's device afterwards, touching
/// nothing when it is already current.
class DeviceGuard {
 public:
  DeviceGuard(int device, const char* op);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = -1;
  bool switched_ = false;
};

/// A stream given as `stream=`: None (legacy default stream), an int handle, or an object with
/// __cuda_stream__, .cuda_stream (torch) or .ptr (CuPy).
struct StreamArg {
  cudaStream_t handle = cudaStreamLegacy;
};

StreamArg parse_stream(py::handle obj, const char* op);

/// The integer that names `stream` in the DLPack and __cuda_array_interface__ protocols: 1 for the
/// legacy default stream, 2 for the per-thread default stream, else the handle.
int64_t stream_protocol_value(cudaStream_t stream);

/// The stream a protocol integer names (0 and 1: legacy default stream, 2: per-thread default).
cudaStream_t stream_from_protocol_value(int64_t value);

/// True when a and b are the same stream (0 and the legacy handle are the same stream).
bool same_stream(cudaStream_t a, cudaStream_t b);

/// True while `stream` is being captured into a CUDA graph; a failed query raises CudaError
/// naming `op`.
bool capturing(cudaStream_t stream, const std::string& op);

/// Makes `consumer` wait for the work queued so far on `producer` (an event recorded on the
/// producer, waited on by the consumer). The current device must be the streams' device.
void order_after(cudaStream_t producer, cudaStream_t consumer, const char* op);

/// "int", "numpy.ndarray", ...: how an object's type is named in messages.
std::string type_name(py::handle obj);

/// "(3, 4)", "(5,)", "()": a shape or strides as Python prints a tuple.
std::string shape_text(const std::vector<int64_t>& shape);

/// An int argument (not a bool) that fits int64: TypeError "<op>: <what> must be an int, got
/// <type>", or ValueError "<op>: <what> is out of range".
int64_t int_arg(py::handle obj, const char* op, const char* what);

/// An iteration count, an int from 0 to 2^30 (ValueError "<op>: n_iters must be in [0, 2^30]").
int iters_arg(py::handle obj, const char* op);

/// Strides in elements of a C-contiguous array of `shape`.
/// A bool argument (Python bool or numpy.bool_): TypeError naming `op` and `what` for anything
/// else, so that a stray value is not taken for its truth.
bool bool_arg(py::handle obj, const char* op, const char* what);

/// A str argument: TypeError naming `op` and `what` for anything else (bytes included).
std::string str_arg(py::handle obj, const char* op, const char* what);

/// A file system path from `obj` (str, bytes or os.PathLike, through os.fspath; str encoded as
/// os.fsencode does): TypeError for anything else, ValueError for an embedded NUL, both naming
/// `op` and `what`.
std::string path_arg(py::handle obj, const char* op, const char* what);

std::vector<int64_t> contiguous_strides(const std::vector<int64_t>& shape);

}  // namespace cudaops::python
