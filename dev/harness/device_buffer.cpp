#include "harness/device_buffer.h"

#include <cuda_runtime_api.h>

#include <string>
#include <utility>

#include "core/checked.h"
#include "harness/cuda_util.h"

namespace cudaops::harness {

DeviceBuffer::~DeviceBuffer() {
  reset();
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : ptr_(std::exchange(other.ptr_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    reset();
    ptr_ = std::exchange(other.ptr_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

Status DeviceBuffer::allocate(int64_t bytes) {
  reset();
  if (bytes < 0) {
    return Status(StatusCode::kInvalidArgument,
                  "a device buffer of " + std::to_string(bytes) + " bytes");
  }
  if (bytes == 0) return Status();
  Status status = cuda_check(cudaMalloc(&ptr_, static_cast<size_t>(bytes)),
                             "cudaMalloc of " + std::to_string(bytes) + " bytes");
  if (!status.ok()) {
    ptr_ = nullptr;
    return status;
  }
  bytes_ = bytes;
  return Status();
}

void DeviceBuffer::reset() {
  if (ptr_ != nullptr) cudaFree(ptr_);
  ptr_ = nullptr;
  bytes_ = 0;
}

}  // namespace cudaops::harness

namespace cudaops::harness {

Status DeviceArray::allocate(DType dtype, int64_t size, int64_t offset) {
  dtype_ = dtype;
  size_ = size;
  const int64_t element = dtype_size(dtype);
  int64_t count = 0, bytes = 0;
  if (size < 0 || offset < 0 || !detail::checked_add(size, offset, &count) ||
      !detail::checked_mul(count, element, &bytes)) {
    size_ = 0;
    data_ = nullptr;
    buffer_.reset();
    return Status(StatusCode::kInvalidArgument,
                  "a device array of " + std::to_string(size) + " + " + std::to_string(offset) +
                      " " + dtype_name(dtype) +
                      " elements: its size in bytes does not fit 64 bits");
  }
  Status status = buffer_.allocate(bytes);
  data_ = static_cast<unsigned char*>(buffer_.get()) + offset * element;
  if (size + offset == 0) data_ = nullptr;
  return status;
}

Status DeviceArray::upload(const ref::HostArray& host, cudaStream_t stream) {
  if (host.dtype() != dtype_ || host.size() != size_) {
    return Status(StatusCode::kInvalidArgument, "DeviceArray::upload: dtype or size differ");
  }
  if (size_ == 0) return Status();
  Status status = cuda_check(cudaMemcpyAsync(data_, host.data(), static_cast<size_t>(size_bytes()),
                                             cudaMemcpyHostToDevice, stream),
                             "cudaMemcpyAsync host to device");
  if (!status.ok()) return status;
  return cuda_check(cudaStreamSynchronize(stream), "cudaStreamSynchronize after upload");
}

Status DeviceArray::download(ref::HostArray* host, cudaStream_t stream) const {
  if (host->dtype() != dtype_ || host->size() != size_) *host = ref::HostArray(dtype_, size_);
  if (size_ == 0) return Status();
  Status status = cuda_check(cudaMemcpyAsync(host->data(), data_, static_cast<size_t>(size_bytes()),
                                             cudaMemcpyDeviceToHost, stream),
                             "cudaMemcpyAsync device to host");
  if (!status.ok()) return status;
  return cuda_check(cudaStreamSynchronize(stream), "cudaStreamSynchronize after download");
}

Status DeviceArray::poison(cudaStream_t stream) {
  if (size_ == 0) return Status();
  return cuda_check(cudaMemsetAsync(data_, 0xff, static_cast<size_t>(size_bytes()), stream),
                    "cudaMemsetAsync (poison)");
}

}  // namespace cudaops::harness
