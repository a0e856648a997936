#pragma once

// Hopper's warpgroup matrix instructions (wgmma, sm_90a) as the k-means assignment uses them
// (kmeans_assign_sm90a.cuh): 16-bit operands in shared memory in the 128-byte swizzled K-major
// layout, a warpgroup's 64 rows times kWgmmaN columns into float32 accumulators. Compiled to
// nothing outside sm_90a.
#include <cstdint>
#include <type_traits>

#include "engine/kmeans_device.cuh"

namespace cudaops::detail::kmeans {
namespace {

constexpr int kWgThreads = 128;  // a warpgroup
constexpr int kWgmmaN = 128;     // centroids per step
constexpr int kAtomValues = 64;  // 16-bit values per 128-byte swizzled row

/// Byte offset of 16-byte piece p (0 to 8 k_blocks - 1) of row r in a swizzled tile of `rows`
/// rows: K-block p / 8, then the row, then piece p % 8 permuted by r mod 8.
__device__ __forceinline__ uint32_t swizzled(int rows, int r, int p) {
  return static_cast<uint32_t>(((p >> 3) * rows + r) * 128 + (((p & 7) ^ (r & 7)) << 4));
}

/// A wgmma shared-memory descriptor: K-major, 128-byte swizzle, 8-row groups 1024 bytes apart.
/// The low word holds address / 16 in 14 bits (shared memory is under 2^18 bytes), so an offset
/// into a tile is added to the low word: one uniform add a product instead of the masks and shifts
/// of a descriptor built from the address.
__device__ __forceinline__ uint32_t descriptor_low(uint32_t address) {
  return ((address & 0x3FFFF) >> 4) | (1u << 16);
}
constexpr uint32_t kDescriptorHigh = (1024 >> 4) | (1u << 30);
__device__ __forceinline__ uint64_t descriptor_at(uint32_t low, uint32_t offset) {
  return (uint64_t{kDescriptorHigh} << 32) | (low + (offset >> 4));
}

// wgmma.m64n128k16 with float32 accumulators d[0..63] for 16-bit operands of PTX type TYPE, both
// K-major in shared memory (descriptors a and b); d is overwritten where accumulate is 0.
#define CUDAOPS_WGMMA_M64N128K16(TYPE)                                                             \
  asm volatile(                                                                                    \
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"                                                 \
      "wgmma.mma_async.sync.aligned.m64n128k16.f32." TYPE "." TYPE                                 \
      " {"                                                                                         \
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "                     \
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "           \
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "           \
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"             \
      "}, %64, %65, p, 1, 1, 0, 0;\n}\n"                                                           \
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),        \
        "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),    \
        "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), \
        "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), \
        "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), \
        "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), \
        "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), \
        "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), \
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), \
        "+f"(d[63])                                                                                \
      : "l"(a), "l"(b), "r"(accumulate))

/// d (64 x 128 float32 accumulators of the warpgroup) = or += a . b^T over 16 values of K.
template <typename T>
__device__ __forceinline__ void wgmma_128(float (&d)[64], uint64_t a, uint64_t b, int accumulate) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  if constexpr (std::is_same_v<T, __half>) {
    CUDAOPS_WGMMA_M64N128K16("f16");
  } else {
    CUDAOPS_WGMMA_M64N128K16("bf16");
  }
#else
  (void)d;
  (void)a;
  (void)b;
  (void)accumulate;
#endif
}
#undef CUDAOPS_WGMMA_M64N128K16

__device__ __forceinline__ void wgmma_fence() {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void wgmma_commit() {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#endif
}
/// Waits until at most N of the warpgroup's committed groups of wgmma are pending.
template <int N>
__device__ __forceinline__ void wgmma_wait() {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
#endif
}
/// Orders this thread's shared-memory writes (cp.async and ordinary stores) before the tensor
/// cores' reads that follow the next barrier.
__device__ __forceinline__ void fence_async_shared() {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
}
/// Keeps the compiler from moving accesses of the accumulators across the wgmma that owns them.
__device__ __forceinline__ void hold(float (&d)[64]) {
#pragma unroll
  for (int i = 0; i < 64; ++i)
    asm volatile("" : "+f"(d[i]));
}

/// acc = a . b^T for a warpgroup's 64 rows at `a` (in a swizzled tile of a_rows rows) and kWgmmaN
/// centroids at `b`, over kKBlocks blocks of 64 values of K; issued, not committed.
template <typename T, int kKBlocks>
__device__ __forceinline__ void multiply_chunk(float (&acc)[64], uint32_t a, int a_rows,
                                               uint32_t b) {
  wgmma_fence();
  const uint32_t a_low = descriptor_low(a), b_low = descriptor_low(b);
#pragma unroll
  for (int s = 0; s < kKBlocks * 4; ++s) {
    const uint32_t a_off = (s >> 2) * a_rows * 128 + (s & 3) * 32;
    const uint32_t b_off = (s >> 2) * kWgmmaN * 128 + (s & 3) * 32;
    wgmma_128<T>(acc, descriptor_at(a_low, a_off), descriptor_at(b_low, b_off), s > 0 ? 1 : 0);
  }
}

}  // namespace
}  // namespace cudaops::detail::kmeans
