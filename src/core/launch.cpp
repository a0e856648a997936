#include "core/launch.h"

#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

namespace cudaops::detail {

Status cuda_status(cudaError_t error, const char* op, const char* what) {
  return Status(StatusCode::kCudaError,
                std::string(op) + ": " + what + ": " + cuda_error_description(error) + " (" +
                    cudaGetErrorName(error) + ")",
                static_cast<int>(error));
}

Status cluster_image(const char* op, const void* kernel, cudaFuncAttributes* attributes, bool* ok) {
  *ok = false;
  int device = 0;
  int major = 0;
  cudaError_t error = cudaGetDevice(&device);
  if (error == cudaSuccess) {
    error = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
  }
  if (error != cudaSuccess) return cuda_status(error, op, "querying the device");
  if (major < 9) return Status();
  error = cudaFuncGetAttributes(attributes, kernel);
  if (error != cudaSuccess) return cuda_status(error, op, "querying the kernel");
  *ok = attributes->ptxVersion >= 90 && attributes->binaryVersion >= 90;
  return Status();
}

Status dependent_launch(const char* op, const void* kernel, bool* ok) {
  *ok = false;
  static const bool enabled = [] {
    const char* value = std::getenv("CUDAOPS_DEPENDENT_LAUNCH");
    return value == nullptr || std::strcmp(value, "0") != 0;
  }();
  if (!enabled) return Status();
  int device = 0;
  const cudaError_t error = cudaGetDevice(&device);
  if (error != cudaSuccess) return cuda_status(error, op, "querying the device");
  struct Entry {
    const void* kernel;
    int device;
    bool ok;
  };
  static std::mutex mutex;
  static std::vector<Entry> known;
  {
    const std::lock_guard<std::mutex> lock(mutex);
    for (const Entry& e : known) {
      if (e.kernel == kernel && e.device == device) {
        *ok = e.ok;
        return Status();
      }
    }
  }
  cudaFuncAttributes attributes = {};
  bool image = false;
  if (Status s = cluster_image(op, kernel, &attributes, &image); !s.ok()) return s;
  const std::lock_guard<std::mutex> lock(mutex);
  known.push_back({kernel, device, image});
  *ok = image;
  return Status();
}

Status check_launch(const char* op, cudaStream_t stream) {
  cudaError_t error = cudaGetLastError();
  if (error != cudaSuccess) return cuda_status(error, op, "kernel launch failed");
#if defined(CUDAOPS_DEBUG_SYNC)
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  error = cudaStreamIsCapturing(stream, &capture);
  if (error != cudaSuccess) return cuda_status(error, op, "cudaStreamIsCapturing failed");
  if (capture == cudaStreamCaptureStatusNone) {
    error = cudaStreamSynchronize(stream);
    if (error != cudaSuccess) return cuda_status(error, op, "kernel failed (debug sync)");
  }
#else
  (void)stream;
#endif
  return Status();
}

}  // namespace cudaops::detail
