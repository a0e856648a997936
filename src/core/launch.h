#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>

#include "cudaops/status.h"

namespace cudaops::detail {

/// Blocks of `per_block` items each that cover `items`: at least one, at most 2^30 (a grid's x
/// limit, with room), so that a kernel striding by the grid covers the rest.
inline unsigned blocks_for(int64_t items, int64_t per_block) {
  const int64_t blocks = (items + per_block - 1) / per_block;
  return static_cast<unsigned>(std::min<int64_t>(std::max<int64_t>(blocks, 1), int64_t{1} << 30));
}

/// Checks the launch that was just made on `stream` by `op`. With CUDAOPS_DEBUG_SYNC it also
/// waits for the stream (unless it is being captured), so that a fault inside the kernel is
/// reported by the op that caused it rather than by a later call.
Status check_launch(const char* op, cudaStream_t stream);

/// A kCudaError status for `error`, naming `op` and what it was doing.
Status cuda_status(cudaError_t error, const char* op, const char* what);

/// Lets `kernel` launch with `smem` bytes of dynamic shared memory: opts it in past the default
/// 48 KiB where its static and dynamic shared memory together need that, and refuses a size the
/// current device cannot give one block with a status naming `op`. What it learns of a kernel is
/// kept per device, so that later launches ask the driver nothing.
Status allow_dynamic_smem(const char* op, const void* kernel, size_t smem);

/// The most dynamic shared memory a block of `kernel` may have on the current device: the opt-in
/// limit less the kernel's static shared memory. Remembered per kernel and device, as
/// allow_dynamic_smem's answers are.
Status max_dynamic_smem(const char* op, const void* kernel, size_t* bytes);

/// Sets *ok when `kernel` may use thread-block clusters (and bulk copies) on the current device:
/// sm_90 or newer, running an image compiled from sm_90 PTX or newer. Fills *attributes.
Status cluster_image(const char* op, const void* kernel, cudaFuncAttributes* attributes, bool* ok);

/// cluster_image's answer, asked once per kernel and device.
Status clusters_allowed(const char* op, const void* kernel, bool* ok);

/// Sets *ok when `kernel` is launched as dependent on the kernel before it in the stream
/// (LaunchConfig's `dependent`): where cluster_image allows, so that the kernel's
/// griddepcontrol.wait is compiled in, unless the environment variable CUDAOPS_DEPENDENT_LAUNCH
/// is 0 (read once). Computed once per kernel and device.
Status dependent_launch(const char* op, const void* kernel, bool* ok);

/// Sets *ok when the current device has an image of `kernel` it can load (an sm_90a kernel loads
/// on compute capability 9.0 alone). Asked once per kernel and device.
Status image_loads(const char* op, const void* kernel, bool* ok);

}  // namespace cudaops::detail
