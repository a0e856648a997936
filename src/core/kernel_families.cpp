#include "core/kernel_families.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "core/launch.h"
#include "cudaops/kernels.h"

namespace cudaops {
namespace {

// A function-local list: registrations run from other sources' static initialisers, in an order
// the linker chooses.
std::vector<detail::KernelFamily>& families() {
  static std::vector<detail::KernelFamily> list;
  return list;
}

}  // namespace

namespace detail {

bool register_kernel_family(const KernelFamily& family) {
  auto& list = families();
  const auto at = std::find_if(list.begin(), list.end(), [&](const KernelFamily& f) {
    return std::strcmp(family.name, f.name) < 0;
  });
  list.insert(at, family);
  return true;
}

}  // namespace detail

int kernel_family_count() noexcept {
  return static_cast<int>(families().size());
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
  const detail::KernelFamily& family = families()[static_cast<size_t>(index)];
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
