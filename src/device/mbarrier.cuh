#pragma once

// mbarriers in shared memory (sm_90 and newer; elsewhere these compile to nothing and the host
// code does not launch what uses them): a phase completes when its expected arrivals (and, with
// arrive_expect, its expected bytes of bulk copies) are in; waiting names the phase by parity.
#include <cstdint>

#include "device/cluster.cuh"
#include "device/shared_memory.cuh"

namespace cudaops::detail {

__device__ __forceinline__ void mbarrier_init(uint64_t* bar, unsigned count) {
#if CUDAOPS_HAS_CLUSTERS
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(shared_address(bar)), "r"(count)
               : "memory");
#else
  (void)bar;
  (void)count;
#endif
}

/// Makes initialised mbarriers visible to the copy engine (and to the cluster).
__device__ __forceinline__ void mbarrier_init_fence() {
#if CUDAOPS_HAS_CLUSTERS
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
#endif
}

/// Arrives on the barrier (release: this thread's earlier shared-memory accesses are seen by
/// whoever waits for the phase).
__device__ __forceinline__ void mbarrier_arrive(uint64_t* bar) {
#if CUDAOPS_HAS_CLUSTERS
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(shared_address(bar)) : "memory");
#else
  (void)bar;
#endif
}

/// Arrives on the barrier and tells it to expect `bytes` more from bulk copies in this phase.
__device__ __forceinline__ void mbarrier_arrive_expect(uint64_t* bar, uint32_t bytes) {
#if CUDAOPS_HAS_CLUSTERS
  asm volatile(
      "mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(shared_address(bar)),
      "r"(bytes)
      : "memory");
#else
  (void)bar;
  (void)bytes;
#endif
}

/// Waits until the barrier's phase with the given parity has completed (acquire).
__device__ __forceinline__ void mbarrier_wait(uint64_t* bar, uint32_t parity) {
#if CUDAOPS_HAS_CLUSTERS
  asm volatile(
      "{\n"
      ".reg .pred done;\n"
      "WAIT:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT;\n"
      "}\n" ::"r"(shared_address(bar)),
      "r"(parity)
      : "memory");
#else
  (void)bar;
  (void)parity;
#endif
}

}  // namespace cudaops::detail
