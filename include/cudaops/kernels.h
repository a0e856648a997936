#pragma once

// The kernel families of this build, for tools that report how the current GPU runs them: from
// machine code (SASS) built for its architecture, or from PTX that the driver compiles when the
// code is loaded. `cudaops info` prints this for every family.

#include <cstdint>

#include "cudaops/export.h"
#include "cudaops/status.h"

namespace cudaops {

/// How the current device runs one family of kernels (one CUDA source of the library), as the
/// CUDA runtime reports it for one kernel of the family.
struct KernelFamilyInfo {
  const char* name = nullptr;    ///< "elementwise", "softmax", "norm", "topk", "kmeans", ...
  const char* source = nullptr;  ///< the source file, e.g. "topk_f32.cu"
  const char* kernel = nullptr;  ///< mangled name of the kernel asked about ("" if unknown)
  /// Architecture of the code the device runs, major * 10 + minor (90 for sm_90). Code built
  /// for an older minor of the same major (sm_80 on sm_86) shows the older one; code compiled
  /// from PTX at load time shows the device's own.
  int binary_version = 0;
  int ptx_version = 0;  ///< virtual architecture of the PTX the code was compiled from
  int registers = 0;    ///< per thread, of the kernel asked about
  int max_threads_per_block = 0;
  int64_t local_bytes = 0;          ///< per thread: stack frame and spills
  int64_t static_shared_bytes = 0;  ///< per block
};

/// Number of kernel families in this build.
CUDAOPS_EXPORT int kernel_family_count() noexcept;

/// Describes family `index` (0 <= index < kernel_family_count()) on the current device. Asking
/// loads the kernel if it was not loaded yet (CUDA's lazy loading), as its first launch would:
/// a family that runs from PTX is compiled by the driver here. Fails with kInvalidArgument for
/// a bad index or null `info`, and with kCudaError when there is no usable device or the device
/// has no code for the family (cudaErrorNoKernelImageForDevice).
[[nodiscard]] CUDAOPS_EXPORT Status kernel_family_info(int index, KernelFamilyInfo* info) noexcept;

}  // namespace cudaops
