#include "core/kernel_families.h"

#include <cuda_runtime_api.h>

#include <iterator>
#include <string>

#include "core/launch.h"
#include "cudaops/kernels.h"

namespace cudaops {
namespace {

struct Family {
  const char* name;
  const char* source;
  const void* (*kernel)();
};

// One row per CUDA source of the library.
constexpr Family kFamilies[] = {
    {"elementwise", "elementwise.cu", detail::elementwise_family_kernel},
    {"softmax", "softmax.cu", detail::rowwise::softmax_family_kernel},
    {"norm", "norm_forward_f32.cu", detail::rowwise::norm_family_kernel},
    {"rowwise_reduce", "rowwise_host.cu", detail::rowwise::reduce_family_kernel},
    {"topk", "topk_f32.cu", detail::topk::topk_family_kernel},
};

}  // namespace

int kernel_family_count() noexcept {
  return static_cast<int>(std::size(kFamilies));
}

Status kernel_family_info(int index, KernelFamilyInfo* info) noexcept {
  constexpr const char* kOp = "kernel_family_info";
  if (index < 0 || index >= kernel_family_count()) {
    return Status(StatusCode::kInvalidArgument, std::string(kOp) + ": index must be in [0, " +
                                                    std::to_string(kernel_family_count()) +
                                                    "), got " + std::to_string(index));
  }
  if (info == nullptr) {
    return Status(StatusCode::kInvalidArgument, std::string(kOp) + ": info must not be null");
  }
  const Family& family = kFamilies[index];
  KernelFamilyInfo result;
  result.name = family.name;
  result.source = family.source;
  result.kernel = "";
  cudaFuncAttributes attributes{};
  const cudaError_t error = cudaFuncGetAttributes(&attributes, family.kernel());
  if (error != cudaSuccess) {
    cudaGetLastError();  // not sticky: leave no error for the caller's next check
    *info = result;
    return detail::cuda_status(error, kOp, (std::string("family ") + family.name).c_str());
  }
  const char* name = nullptr;
  if (cudaFuncGetName(&name, family.kernel()) == cudaSuccess && name != nullptr) {
    result.kernel = name;
  } else {
    cudaGetLastError();
  }
  result.binary_version = attributes.binaryVersion;
  result.ptx_version = attributes.ptxVersion;
  result.registers = attributes.numRegs;
  result.max_threads_per_block = attributes.maxThreadsPerBlock;
  result.local_bytes = static_cast<int64_t>(attributes.localSizeBytes);
  result.static_shared_bytes = static_cast<int64_t>(attributes.sharedSizeBytes);
  *info = result;
  return Status();
}

}  // namespace cudaops
