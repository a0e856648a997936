#pragma once

// Warp-level matrix products (mma.sync) on float32 accumulators: 16-bit operands, or float32
// ones as TF32 (rounded, or split into two TF32 parts), loaded from shared memory by ldmatrix;
// the fragments' layouts as PTX defines them. Turing lacks bfloat16 and TF32 products: there they
// are done by lanes.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "device/arch.cuh"
#include "device/numeric.cuh"
#include "device/shared_memory.cuh"
#include "device/warp.cuh"

namespace cudaops::detail {
namespace {

/// v rounded to TF32 (10 mantissa bits, to nearest, ties away from zero), in a float's bits.
__device__ __forceinline__ uint32_t tf32_bits(float v) {
#if CUDAOPS_DEVICE_TURING
  uint32_t bits = __float_as_uint(v);
  if ((bits & 0x7f800000u) != 0x7f800000u) bits = (bits + 0x1000u) & 0xffffe000u;
  return bits;
#else
  uint32_t bits;
  asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(bits) : "f"(v));
  return bits;
#endif
}

/// v as a product operand of type T: 16-bit T rounded; float32 rounded to TF32 where the products
/// are single TF32 ones (`tf32`), else kept whole (the products split it, split_tf32).
template <typename T>
__device__ __forceinline__ T operand_value(float v, bool tf32) {
  if constexpr (std::is_same_v<T, float>) {
    return tf32 ? __uint_as_float(tf32_bits(v)) : v;
  } else {
    return from_float<T>(v);
  }
}

/// x (a float's bits) as hi + lo, both TF32: hi = x rounded, lo = the rest rounded. hi.hi +
/// hi.lo + lo.hi carries about float32's precision (lo.lo is below it: 3xTF32).
__device__ __forceinline__ void split_tf32(uint32_t& x, uint32_t& lo) {
  const float v = __uint_as_float(x);
  x = tf32_bits(v);
  lo = tf32_bits(v - __uint_as_float(x));
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(shared_address(p)));
}

/// The two 16-bit values of a fragment register (the lower k first) as floats.
template <typename T>
__device__ __forceinline__ float2 pair_values(uint32_t bits) {
  if constexpr (std::is_same_v<T, __half>) {
    return __half22float2(*reinterpret_cast<const __half2*>(&bits));
  } else {
    return make_float2(__uint_as_float(bits << 16), __uint_as_float(bits & 0xffff0000u));
  }
}

/// mma's product without tensor cores (Turing's bfloat16 and TF32): each lane gathers the k
/// values of its rows (g, g + 8) from its quad and those of its columns (2 t, 2 t + 1) from
/// their holders, and multiplies them in float32. Correct, and slow.
template <typename T>
__device__ __forceinline__ void mma_by_lanes(float (&acc)[4], const uint32_t (&a)[4], uint32_t b0,
                                             uint32_t b1) {
  const int lane = static_cast<int>(threadIdx.x % 32), g = lane / 4, t = lane % 4;
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    const int row = 4 * g + q, col0 = 8 * t + q, col1 = 8 * t + 4 + q;
    const uint32_t r0 = __shfl_sync(0xffffffffu, a[0], row),
                   r1 = __shfl_sync(0xffffffffu, a[1], row);
    const uint32_t r2 = __shfl_sync(0xffffffffu, a[2], row),
                   r3 = __shfl_sync(0xffffffffu, a[3], row);
    const uint32_t c0 = __shfl_sync(0xffffffffu, b0, col0),
                   c0h = __shfl_sync(0xffffffffu, b1, col0);
    const uint32_t c1 = __shfl_sync(0xffffffffu, b0, col1),
                   c1h = __shfl_sync(0xffffffffu, b1, col1);
    if constexpr (std::is_same_v<T, float>) {
      // m16n8k8 TF32: a0 = A[g][t], a1 = A[g + 8][t], a2 = A[g][t + 4], a3 = A[g + 8][t + 4];
      // b0 = B[t][g], b1 = B[t + 4][g].
      const float x0 = __uint_as_float(r0), x1 = __uint_as_float(r1);
      const float x2 = __uint_as_float(r2), x3 = __uint_as_float(r3);
      const float y0 = __uint_as_float(c0), y0h = __uint_as_float(c0h);
      const float y1 = __uint_as_float(c1), y1h = __uint_as_float(c1h);
      acc[0] = fmaf(x0, y0, fmaf(x2, y0h, acc[0]));
      acc[1] = fmaf(x0, y1, fmaf(x2, y1h, acc[1]));
      acc[2] = fmaf(x1, y0, fmaf(x3, y0h, acc[2]));
      acc[3] = fmaf(x1, y1, fmaf(x3, y1h, acc[3]));
    } else {
      // m16n8k16: a0 = A[g][2t, 2t + 1], a1 = A[g + 8][2t, ...], a2 = A[g][2t + 8, ...],
      // a3 = A[g + 8][2t + 8, ...]; b0 = B[2t, 2t + 1][g], b1 = B[2t + 8, ...][g].
      const auto dot = [](uint32_t x, uint32_t y, float sum) {
        const float2 u = pair_values<T>(x), v = pair_values<T>(y);
        return fmaf(u.x, v.x, fmaf(u.y, v.y, sum));
      };
      acc[0] = dot(r0, c0, dot(r2, c0h, acc[0]));
      acc[1] = dot(r0, c1, dot(r2, c1h, acc[1]));
      acc[2] = dot(r1, c0, dot(r3, c0h, acc[2]));
      acc[3] = dot(r1, c1, dot(r3, c1h, acc[3]));
    }
  }
}

/// acc += a . b over one 32-byte step of k (16 values of 16 bits, 8 of TF32).
template <typename T>
__device__ __forceinline__ void mma(float (&acc)[4], const uint32_t (&a)[4], uint32_t b0,
                                    uint32_t b1) {
#if CUDAOPS_DEVICE_TURING
  if constexpr (std::is_same_v<T, __half>) {
    // Two m16n8k8 products: k 0-7 from a0, a1, b0; k 8-15 from a2, a3, b1.
    asm volatile(
        "mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5}, {%6}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(acc[0]), "+f"(acc[1]), "+f"(acc[2]), "+f"(acc[3])
        : "r"(a[0]), "r"(a[1]), "r"(b0));
    asm volatile(
        "mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5}, {%6}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(acc[0]), "+f"(acc[1]), "+f"(acc[2]), "+f"(acc[3])
        : "r"(a[2]), "r"(a[3]), "r"(b1));
  } else {
    mma_by_lanes<T>(acc, a, b0, b1);
  }
#else
  if constexpr (std::is_same_v<T, __half>) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(acc[0]), "+f"(acc[1]), "+f"(acc[2]), "+f"(acc[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(acc[0]), "+f"(acc[1]), "+f"(acc[2]), "+f"(acc[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(acc[0]), "+f"(acc[1]), "+f"(acc[2]), "+f"(acc[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
#endif
}

/// The four lanes of a row (lane % 4) hold the minima (v, j) of its columns interleaved: each
/// gets the smallest, the lower index on a tie.
__device__ __forceinline__ void row_minimum(float& v, int& j) {
#pragma unroll
  for (int o = 1; o < 4; o <<= 1) {
    const float ov = __shfl_xor_sync(kFull, v, o);
    const int oj = __shfl_xor_sync(kFull, j, o);
    if (ov < v || (ov == v && oj < j)) {
      v = ov;
      j = oj;
    }
  }
}

}  // namespace
}  // namespace cudaops::detail
