#include "harness/gemm_yardstick.h"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <mutex>
#include <string>
#include <utility>

#include "harness/device_buffer.h"
#include "harness/timing.h"
#include "reference/host_array.h"

namespace cudaops::harness {
namespace {

Status blas_status(cublasStatus_t s, const char* what) {
  if (s == CUBLAS_STATUS_SUCCESS) return Status();
  return Status(StatusCode::kCudaError, std::string("GEMM yardstick: ") + what +
                                            " failed (cuBLAS status " +
                                            std::to_string(static_cast<int>(s)) + ")");
}

}  // namespace

Status gemm_yardstick(DType dtype, double flops, double* tflops) {
  static std::mutex mutex;
  static std::map<std::pair<int, int64_t>, double> measured;
  int64_t size = std::llround(std::cbrt(flops / 2.0) / 256.0) * 256;
  size = std::min<int64_t>(std::max<int64_t>(size, 512), 16384);
  std::lock_guard<std::mutex> lock(mutex);
  const auto key = std::make_pair(static_cast<int>(dtype), size);
  if (auto found = measured.find(key); found != measured.end()) {
    *tflops = found->second;
    return Status();
  }
  cudaDataType_t type = CUDA_R_16F;
  cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
  if (dtype == DType::kBFloat16) {
    type = CUDA_R_16BF;
  } else if (dtype == DType::kFloat32) {
    type = CUDA_R_32F;
    compute = CUBLAS_COMPUTE_32F_FAST_TF32;
  }
  const int64_t count = size * size;
  ref::HostArray host(dtype, count);
  ref::fill_random(host, 17);
  DeviceArray a, b, c;
  Status status = a.allocate(dtype, count);
  if (status.ok()) status = b.allocate(dtype, count);
  if (status.ok()) status = c.allocate(dtype, count);
  if (status.ok()) status = a.upload(host, nullptr);
  if (status.ok()) status = b.upload(host, nullptr);
  if (!status.ok()) return status;
  cublasHandle_t handle = nullptr;
  if (Status s = blas_status(cublasCreate(&handle), "cublasCreate"); !s.ok()) return s;
  const float one = 1.0f, zero = 0.0f;
  const int n = static_cast<int>(size);
  cublasStatus_t last = CUBLAS_STATUS_SUCCESS;
  Timing timing;
  status = time_on_stream(
      [&](cudaStream_t stream) {
        cublasSetStream(handle, stream);
        last =
            cublasGemmEx(handle, CUBLAS_OP_T, CUBLAS_OP_N, n, n, n, &one, a.data(), type, n,
                         b.data(), type, n, &zero, c.data(), type, n, compute, CUBLAS_GEMM_DEFAULT);
        return blas_status(last, "cublasGemmEx");
      },
      nullptr, 3, 10, &timing, 1);
  cublasDestroy(handle);
  if (!status.ok()) return status;
  *tflops = 2.0 * static_cast<double>(size) * static_cast<double>(size) *
            static_cast<double>(size) / (timing.median_ms * 1e-3) / 1e12;
  measured[key] = *tflops;
  return Status();
}

}  // namespace cudaops::harness
