#pragma once

// Asynchronous copies from global to shared memory (cp.async, sm_80 and newer), with the same
// calls on Turing, where they are a load and a store.
#include <cstdint>

#include "device/arch.cuh"
#include "device/shared_memory.cuh"

namespace cudaops::detail {
namespace {

/// 16 bytes from global to shared memory (at shared address `dst`), of which `bytes` (0 to 16) are
/// read and the rest zero.
/// (Turing: a load and a store, done when it returns; copy_commit and copy_wait do nothing.)
__device__ __forceinline__ void copy16(uint32_t dst, const void* src, int bytes) {
#if CUDAOPS_DEVICE_TURING
  uint32_t w[4] = {0u, 0u, 0u, 0u};
  if (bytes == 16) {
    const uint4 v = *static_cast<const uint4*>(src);
    w[0] = v.x;
    w[1] = v.y;
    w[2] = v.z;
    w[3] = v.w;
  } else {
    const auto* p = static_cast<const unsigned char*>(src);
    for (int i = 0; i < bytes; ++i)
      w[i / 4] |= static_cast<uint32_t>(p[i]) << (8 * (i % 4));
  }
  asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};\n" ::"r"(dst), "r"(w[0]), "r"(w[1]),
               "r"(w[2]), "r"(w[3])
               : "memory");
#else
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(bytes));
#endif
}
__device__ __forceinline__ void copy16(void* dst, const void* src, int bytes) {
  copy16(shared_address(dst), src, bytes);
}
__device__ __forceinline__ void copy_commit() {
#if !CUDAOPS_DEVICE_TURING
  asm volatile("cp.async.commit_group;\n" ::);
#endif
}
template <int N>
__device__ __forceinline__ void copy_wait() {
#if !CUDAOPS_DEVICE_TURING
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
#endif
}

}  // namespace
}  // namespace cudaops::detail
