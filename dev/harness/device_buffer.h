#pragma once

#include <cstdint>

#include "cudaops/status.h"

namespace cudaops::harness {

/// Owned device memory (cudaMalloc; 256-byte aligned).
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  Status allocate(int64_t bytes);
  void reset();

  void* get() const { return ptr_; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }
  int64_t size_bytes() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  int64_t bytes_ = 0;
};

}  // namespace cudaops::harness

#include <cuda_runtime_api.h>

#include "cudaops/dtype.h"
#include "reference/host_array.h"

namespace cudaops::harness {

/// A device array of `size` elements of `dtype` that starts `offset` elements past a 256-byte
/// aligned allocation: how the harness gives ops misaligned pointers.
class DeviceArray {
 public:
  Status allocate(DType dtype, int64_t size, int64_t offset = 0);
  void* data() const { return data_; }
  DType dtype() const { return dtype_; }
  int64_t size() const { return size_; }
  int64_t size_bytes() const { return size_ * dtype_size(dtype_); }

  /// Copy of a host array of the same dtype and size, ordered on stream; returns when it is done.
  Status upload(const ref::HostArray& host, cudaStream_t stream);
  /// Copy into `host` (resized to match), ordered on stream, then waits for the stream.
  Status download(ref::HostArray* host, cudaStream_t stream) const;
  /// Fills every byte with 0xff (NaN for float dtypes, -1 for integers), ordered on stream.
  Status poison(cudaStream_t stream);

 private:
  DeviceBuffer buffer_;
  void* data_ = nullptr;
  DType dtype_ = DType::kFloat32;
  int64_t size_ = 0;
};

}  // namespace cudaops::harness
