#pragma once

#include <cuda_runtime.h>

#include <cstddef>

namespace cudaops::detail {

/// A launch through cudaLaunchKernelEx of `blocks` blocks of `threads` threads (one dimension)
/// with `smem` bytes of dynamic shared memory: `cluster` blocks per thread-block cluster (0:
/// no cluster attribute; 1 is a cluster of one block, as occupancy queries may want), and
/// `dependent`: the kernel may start before the previous kernel of the stream ends, and waits for
/// its results itself (griddepcontrol.wait, device/cluster.cuh). Clusters and dependent launches
/// need an sm_90 image (cluster_image, core/launch.h). The configuration points at its own
/// attributes, so it is not copied.
class LaunchConfig {
 public:
  LaunchConfig(unsigned blocks, int threads, size_t smem, cudaStream_t stream, int cluster = 0,
               bool dependent = false) {
    config_.gridDim = dim3(blocks);
    config_.blockDim = dim3(static_cast<unsigned>(threads));
    config_.dynamicSmemBytes = smem;
    config_.stream = stream;
    config_.attrs = attributes_;
    if (cluster > 0) {
      cudaLaunchAttribute& a = attributes_[config_.numAttrs++];
      a.id = cudaLaunchAttributeClusterDimension;
      a.val.clusterDim.x = static_cast<unsigned>(cluster);
      a.val.clusterDim.y = 1;
      a.val.clusterDim.z = 1;
    }
    if (dependent) {
      cudaLaunchAttribute& a = attributes_[config_.numAttrs++];
      a.id = cudaLaunchAttributeProgrammaticStreamSerialization;
      a.val.programmaticStreamSerializationAllowed = 1;
    }
  }
  LaunchConfig(const LaunchConfig&) = delete;
  LaunchConfig& operator=(const LaunchConfig&) = delete;

  /// For cudaOccupancyMaxActiveClusters and the like.
  const cudaLaunchConfig_t& config() const { return config_; }

  void set_blocks(unsigned blocks) { config_.gridDim = dim3(blocks); }
  void set_grid(dim3 grid) { config_.gridDim = grid; }

  template <typename... Params, typename... Args>
  cudaError_t launch(void (*kernel)(Params...), Args... args) const {
    return cudaLaunchKernelEx(&config_, kernel, static_cast<Params>(args)...);
  }

 private:
  cudaLaunchAttribute attributes_[2] = {};
  cudaLaunchConfig_t config_ = {};
};

}  // namespace cudaops::detail
