// cudaops.Array: device memory owned by the module, handed to frameworks zero-copy through
// DLPack or __cuda_array_interface__.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "common.h"
#include "cudaops/dtype.h"
#include "dlpack.h"

namespace cudaops::python {

/// Memory from the device's stream-ordered pool, allocated on the stream of the op that fills it.
/// `ready` is recorded after that op, so consumers on other streams can wait for it; the memory
/// goes back to the pool after `ready`, in the order of the legacy default stream.
struct Allocation {
  void* ptr = nullptr;
  int device = 0;
  cudaEvent_t ready = nullptr;
  // The stream capture that recorded `ready` last (its id; 0: none). Recorded inside a capture,
  // `ready` is an event-record node of the graph (a real event at each replay).
  unsigned long long ready_capture = 0;
  // The capture and stream that last waited for `ready` as an external event: a later wait of
  // the same stream in the same capture adds nothing (a decode loop captured whole).
  unsigned long long waited_capture = 0;
  cudaStream_t waited_stream = nullptr;
  ~Allocation();
};

class Array {
 public:
  /// Uninitialised memory for shape x dtype on `device`, allocated in the order of `stream`.
  Array(std::vector<int64_t> shape, DType dtype, int device, cudaStream_t stream, const char* op);

  const std::vector<int64_t>& shape() const { return shape_; }
  DType dtype() const { return dtype_; }
  int device() const { return memory_->device; }
  void* data() const { return memory_->ptr; }
  int64_t size() const { return size_; }
  int64_t nbytes() const { return size_ * dtype_size(dtype_); }
  cudaStream_t stream() const { return stream_; }

  /// Records that everything queued on `stream` so far produces this array's contents.
  void mark_ready(cudaStream_t stream, const char* op);
  /// mark_ready for an error path: never throws (without an event, it waits for `stream`).
  void mark_ready_noexcept(cudaStream_t stream) noexcept;
  /// Makes `consumer` wait until the contents are produced (no-op without a pending producer).
  void order_before(cudaStream_t consumer) const;

 private:
  std::shared_ptr<Allocation> memory_;
  std::vector<int64_t> shape_;
  DType dtype_;
  int64_t size_ = 0;
  cudaStream_t stream_ = cudaStreamLegacy;
};

/// Hands the unused memory of the pools that arrays come from back to the driver.
void empty_cache();

/// Bytes the pool of `device` holds from the driver, in use or not (0 before its first array).
int64_t memory_reserved(int device);

/// Number of elements of `shape`, checking each extent and the product for overflow.
int64_t checked_size(const std::vector<int64_t>& shape, const char* op, const char* name);

/// A new "dltensor" / "dltensor_versioned" capsule owning `tensor`: a capsule nobody consumes
/// releases it when it dies. On failure the tensor is released and the Python error raised.
py::object make_dlpack_capsule(dl::ManagedTensor* tensor);
py::object make_dlpack_capsule(dl::ManagedTensorVersioned* tensor);

/// The DLPack data type of `dtype`.
dl::DataType dl_dtype(DType dtype);

/// Registers cudaops.Array (with __dlpack__, __dlpack_device__, __cuda_array_interface__).
void bind_array(py::module_& m);

}  // namespace cudaops::python
