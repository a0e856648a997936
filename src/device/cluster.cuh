#pragma once

// Thread-block clusters (sm_90 and newer): barriers with release/acquire semantics at cluster
// scope; and programmatic dependent launches, where a kernel may start before the one before it
// in the stream has finished, and waits for it where it needs its results. On older
// architectures the cluster of a launch is its one block, and these compile to nothing; host
// code only launches clusters, or kernels that depend on the one before, where cluster_image
// (core/launch.h) allows.
#include <cooperative_groups.h>

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define CUDAOPS_HAS_CLUSTERS 1
#else
#define CUDAOPS_HAS_CLUSTERS 0
#endif

namespace cudaops::detail {

__device__ __forceinline__ void cluster_arrive() {
#if CUDAOPS_HAS_CLUSTERS
  asm volatile("barrier.cluster.arrive.release.aligned;\n" ::: "memory");
#endif
}

/// The arrive half of a cluster barrier that orders no memory (for writes ordered by a fence of
/// their own, such as an mbarrier initialisation's).
__device__ __forceinline__ void cluster_arrive_relaxed() {
#if CUDAOPS_HAS_CLUSTERS
  asm volatile("barrier.cluster.arrive.relaxed.aligned;\n" ::: "memory");
#endif
}

__device__ __forceinline__ void cluster_wait() {
#if CUDAOPS_HAS_CLUSTERS
  asm volatile("barrier.cluster.wait.acquire.aligned;\n" ::: "memory");
#endif
}

/// A full cluster barrier: every thread of every block of the cluster arrives, and each one's
/// earlier writes (shared memory of any block, global memory) are visible to all after it.
__device__ __forceinline__ void cluster_sync() {
  cluster_arrive();
  cluster_wait();
}

/// A full cluster barrier whose release fence one warp takes for the block: the block's threads
/// meet first (bar.sync orders their memory operations before warp 0's), warp 0 fences at cluster
/// scope (fence.acq_rel.cluster, a MEMBAR.GPU) before the relaxed arrivals, and every thread's
/// wait acquires. Every thread of the block must call it.
__device__ __forceinline__ void cluster_sync_one_fence() {
#if CUDAOPS_HAS_CLUSTERS
  __syncthreads();
  if (threadIdx.x < 32) asm volatile("fence.acq_rel.cluster;\n" ::: "memory");
#endif
  cluster_arrive_relaxed();
  cluster_wait();
}

/// `p` (this block's shared memory) in block `rank` of the cluster.
template <typename T>
__device__ __forceinline__ T* cluster_peer(T* p, int rank) {
#if CUDAOPS_HAS_CLUSTERS
  return cooperative_groups::this_cluster().map_shared_rank(p, rank);
#else
  (void)rank;
  return p;
#endif
}

/// Waits until the kernels this one was launched to depend on have finished and their writes
/// are visible (at once when it was launched normally).
__device__ __forceinline__ void wait_for_prior_kernels() {
#if CUDAOPS_HAS_CLUSTERS
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}

/// Lets the next kernel of the stream, if it was launched to depend on this one, start now.
__device__ __forceinline__ void allow_next_kernel() {
#if CUDAOPS_HAS_CLUSTERS
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

/// *p, loaded so that this thread's later loads see what was written before the release of the
/// value read (ld.acquire.gpu): for counts that a kernel running at the same time raises.
__device__ __forceinline__ int load_acquire(const int* p) {
  int v;
  asm volatile("ld.acquire.gpu.b32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
  return v;
}

}  // namespace cudaops::detail
