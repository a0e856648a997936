#pragma once

// Batched k-means: the mma.sync fragments of the assignment (kmeans_assign.cuh) and of the
// small problems' fit (kmeans_small.cuh).
#include "kmeans/kmeans_device.cuh"

namespace cudaops::detail::kmeans {
namespace {

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
#if CUDAOPS_KMEANS_TURING
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

/// Bytes of a row of A or B in shared memory: the padded row and 16 bytes more, so that the 8
/// rows an ldmatrix reads fall in different banks.
__host__ __device__ constexpr int smem_row_bytes(int d_pad, int element) {
  return d_pad * element + 16;
}

/// acc = the products of a warp's 16 kM rows (a_base: the lane's ldmatrix address in them) with
/// 64 centroids (b_base: likewise), over `steps` 32-byte steps of the rows.
template <typename T, int kM>
__device__ __forceinline__ void warp_products(float (&acc)[kM][8][4], const unsigned char* a_base,
                                              const unsigned char* b_base, int row_bytes,
                                              int steps) {
#pragma unroll
  for (int m = 0; m < kM; ++m) {
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e)
        acc[m][nt][e] = 0.0f;
    }
  }
  for (int s = 0; s < steps; ++s) {
    uint32_t a[kM][4];
#pragma unroll
    for (int m = 0; m < kM; ++m) {
      ldmatrix_x4(a[m], a_base + m * 16 * row_bytes + s * 32);
      if constexpr (std::is_same_v<T, float>) {
#pragma unroll
        for (int e = 0; e < 4; ++e)
          a[m][e] = tf32_bits(__uint_as_float(a[m][e]));
      }
    }
#pragma unroll
    for (int np = 0; np < 4; ++np) {
      uint32_t bf[4];
      ldmatrix_x4(bf, b_base + np * 16 * row_bytes + s * 32);
#pragma unroll
      for (int m = 0; m < kM; ++m) {
        mma<T>(acc[m][2 * np], a[m], bf[0], bf[1]);
        mma<T>(acc[m][2 * np + 1], a[m], bf[2], bf[3]);
      }
    }
  }
}

/// The running minima of a warp's rows before any centroid: none (score infinite, index
/// INT32_MAX).
template <int kM>
__device__ __forceinline__ void no_minimum(float (&best)[kM][2], int (&best_j)[kM][2]) {
#pragma unroll
  for (int m = 0; m < kM; ++m) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      best[m][h] = INFINITY;
      best_j[m][h] = INT32_MAX;
    }
  }
}

/// The biases of lane t % 4's 16 columns of a chunk: bj[nt][e] of column 8 nt + 2 t + e.
template <typename Bias>
__device__ __forceinline__ void chunk_biases(Bias bias_of, int t, float (&bj)[8][2]) {
#pragma unroll
  for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      bj[nt][e] = bias_of(nt * 8 + 2 * t + e);
    }
  }
}

/// Each row's running minimum over a chunk of 64 centroids from j0 (bias_of(c): the bias of
/// centroid j0 + c, infinite past the last): first the chunk's smallest score of the row, then,
/// only where it beats the running one, the first column that has it (columns in increasing
/// order, so a tie keeps the lower index). Lane t % 4 holds columns 2 t, 2 t + 1 of each 8.
template <int kM, typename Bias>
__device__ __forceinline__ void chunk_minimum(const float (&acc)[kM][8][4], Bias bias_of,
                                              float alpha, int t, int j0, float (&best)[kM][2],
                                              int (&best_j)[kM][2]) {
  float bj[8][2];
  chunk_biases(bias_of, t, bj);
#pragma unroll
  for (int m = 0; m < kM; ++m) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float low = INFINITY;
#pragma unroll
      for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
        for (int e = 0; e < 2; ++e)
          low = fminf(low, fmaf(-alpha, acc[m][nt][2 * h + e], bj[nt][e]));
      }
      if (low < best[m][h]) {
        int at = 0;
#pragma unroll
        for (int nt = 7; nt >= 0; --nt) {
#pragma unroll
          for (int e = 1; e >= 0; --e) {
            if (fmaf(-alpha, acc[m][nt][2 * h + e], bj[nt][e]) == low) at = nt * 8 + 2 * t + e;
          }
        }
        best[m][h] = low;
        best_j[m][h] = j0 + at;
      }
    }
  }
}

/// The smallest placed score of row (m, h) over the lane's places [kLo, kHi) (place p: column
/// 8 (p / 2) + 2 t + p % 2; its 4 low bits replaced by p), as a tree. A NaN score never wins (fminf
/// takes the other value), and an infinite bias placed above 0 is a NaN.
template <uint32_t kLo, uint32_t kHi, int kM>
__device__ __forceinline__ float placed_minimum(const float (&acc)[kM][8][4],
                                                const float (&bj)[8][2], int m, int h, float alpha,
                                                uint32_t low4) {
  if constexpr (kHi - kLo == 1) {
    return low_bits_set<15u, kLo>(
        fmaf(-alpha, acc[m][kLo / 2][2 * h + kLo % 2], bj[kLo / 2][kLo % 2]), low4);
  } else {
    constexpr uint32_t kMid = (kLo + kHi) / 2;
    return fminf(placed_minimum<kLo, kMid>(acc, bj, m, h, alpha, low4),
                 placed_minimum<kMid, kHi>(acc, bj, m, h, alpha, low4));
  }
}

/// As chunk_minimum, in one pass: each score's 4 low bits are replaced by its place among the
/// lane's 16 columns (low_bits_set), so that the chunk's smallest value names its column. Scores
/// within 2^-19 of each other (relative) rank by place rather than value, far inside the
/// products' own rounding; the minimum's value is not kept exactly (only labels are asked for).
template <int kM, typename Bias>
__device__ __forceinline__ void chunk_minimum_placed(const float (&acc)[kM][8][4], Bias bias_of,
                                                     float alpha, int t, int j0,
                                                     float (&best)[kM][2], int (&best_j)[kM][2]) {
  float bj[8][2];
  chunk_biases(bias_of, t, bj);
  const uint32_t low4 = 15u;
#pragma unroll
  for (int m = 0; m < kM; ++m) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const float low = placed_minimum<0, 16>(acc, bj, m, h, alpha, low4);
      if (low < best[m][h]) {
        const int place = static_cast<int>(__float_as_uint(low) & 15u);
        best[m][h] = low;
        best_j[m][h] = j0 + (place >> 1) * 8 + 2 * t + (place & 1);
      }
    }
  }
}

}  // namespace
}  // namespace cudaops::detail::kmeans
