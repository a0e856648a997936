#include "core/launch.h"

#include <algorithm>
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

namespace {

// A kernel's static shared memory on a device, the device's opt-in limit (-1: not asked yet)
// and the dynamic size the kernel has been opted in to.
struct SharedOptIn {
  const void* kernel;
  int device;
  size_t static_bytes;
  int optin;
  size_t allowed;
};

// Remembered per kernel and device, so that a launch on a hot path asks the driver nothing.
std::mutex shared_mutex;
std::vector<SharedOptIn> shared_known;

// The entry of `kernel` on the current device, made on first use (shared_mutex held).
Status shared_entry(const char* op, const void* kernel, bool want_optin, SharedOptIn** entry) {
  int device = 0;
  cudaError_t error = cudaGetDevice(&device);
  if (error != cudaSuccess) return cuda_status(error, op, "querying the device");
  auto it = std::find_if(shared_known.begin(), shared_known.end(), [&](const SharedOptIn& k) {
    return k.kernel == kernel && k.device == device;
  });
  if (it == shared_known.end()) {
    cudaFuncAttributes attributes{};
    error = cudaFuncGetAttributes(&attributes, kernel);
    if (error != cudaSuccess) return cuda_status(error, op, "querying the kernel");
    it = shared_known.insert(shared_known.end(),
                             {kernel, device, attributes.sharedSizeBytes, -1, 0});
  }
  if (want_optin && it->optin < 0) {
    error = cudaDeviceGetAttribute(&it->optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device);
    if (error != cudaSuccess) {
      it->optin = -1;
      return cuda_status(error, op, "querying the device");
    }
  }
  *entry = &*it;
  return Status();
}

}  // namespace

Status max_dynamic_smem(const char* op, const void* kernel, size_t* bytes) {
  *bytes = 0;
  const std::lock_guard<std::mutex> lock(shared_mutex);
  SharedOptIn* entry = nullptr;
  if (Status s = shared_entry(op, kernel, true, &entry); !s.ok()) return s;
  const size_t optin = static_cast<size_t>(entry->optin);
  *bytes = optin > entry->static_bytes ? optin - entry->static_bytes : 0;
  return Status();
}

Status allow_dynamic_smem(const char* op, const void* kernel, size_t smem) {
  if (smem == 0) return Status();
  const std::lock_guard<std::mutex> lock(shared_mutex);
  SharedOptIn* it = nullptr;
  if (Status s = shared_entry(op, kernel, false, &it); !s.ok()) return s;
  if (it->static_bytes + smem <= 48 * 1024 || smem <= it->allowed) return Status();
  if (Status s = shared_entry(op, kernel, true, &it); !s.ok()) return s;
  const int optin = it->optin;
  if (it->static_bytes + smem > static_cast<size_t>(optin)) {
    return Status(StatusCode::kInvalidArgument,
                  std::string(op) + ": the problem needs " +
                      std::to_string(it->static_bytes + smem) +
                      " bytes of shared memory per block; this device gives at most " +
                      std::to_string(optin));
  }
  const cudaError_t error = cudaFuncSetAttribute(
      kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
  if (error != cudaSuccess) return cuda_status(error, op, "setting the shared-memory size");
  it->allowed = smem;
  return Status();
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

namespace {

// What a query about a kernel answered on a device, asked once per (kernel, device, question).
struct KernelFact {
  const void* kernel;
  int device;
  int question;
  bool value;
};

Status once_per_device(const char* op, const void* kernel, int question, bool* ok,
                       Status (*ask)(const char*, const void*, bool*)) {
  *ok = false;
  int device = 0;
  const cudaError_t error = cudaGetDevice(&device);
  if (error != cudaSuccess) return cuda_status(error, op, "querying the device");
  static std::mutex mutex;
  static std::vector<KernelFact> known;
  {
    const std::lock_guard<std::mutex> lock(mutex);
    for (const KernelFact& f : known) {
      if (f.kernel == kernel && f.device == device && f.question == question) {
        *ok = f.value;
        return Status();
      }
    }
  }
  bool value = false;
  if (Status s = ask(op, kernel, &value); !s.ok()) return s;
  const std::lock_guard<std::mutex> lock(mutex);
  known.push_back({kernel, device, question, value});
  *ok = value;
  return Status();
}

}  // namespace

Status clusters_allowed(const char* op, const void* kernel, bool* ok) {
  return once_per_device(op, kernel, 0, ok, [](const char* o, const void* k, bool* image) {
    cudaFuncAttributes attributes = {};
    return cluster_image(o, k, &attributes, image);
  });
}

Status dependent_launch(const char* op, const void* kernel, bool* ok) {
  *ok = false;
  static const bool enabled = [] {
    const char* value = std::getenv("CUDAOPS_DEPENDENT_LAUNCH");
    return value == nullptr || std::strcmp(value, "0") != 0;
  }();
  if (!enabled) return Status();
  return clusters_allowed(op, kernel, ok);
}

Status image_loads(const char* op, const void* kernel, bool* ok) {
  return once_per_device(op, kernel, 1, ok, [](const char* o, const void* k, bool* loads) {
    cudaFuncAttributes attributes = {};
    const cudaError_t error = cudaFuncGetAttributes(&attributes, k);
    *loads = error == cudaSuccess;
    if (error == cudaSuccess) return Status();
    (void)cudaGetLastError();  // a missing image is an answer here, not an error to report later
    if (error == cudaErrorInvalidDeviceFunction || error == cudaErrorNoKernelImageForDevice) {
      return Status();
    }
    return cuda_status(error, o, "querying the kernel");
  });
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
