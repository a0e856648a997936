#pragma once

// Batched k-means: the mma.sync fragments of the assignment (kmeans_assign.cuh) and of the
// small problems' fit (kmeans_small.cuh).
#include "engine/kmeans_device.cuh"

namespace cudaops::detail::kmeans {
namespace {

/// Bytes of a row of A or B in shared memory: the padded row and 16 bytes more, so that the 8
/// rows an ldmatrix reads fall in different banks.
__host__ __device__ constexpr int smem_row_bytes(int d_pad, int element) {
  return d_pad * element + 16;
}

/// warp_products of whole float32 rows and centroids (acc zeroed): each operand split into TF32
/// hi + lo, and acc += lo.hi + hi.lo + hi.hi (the small terms first).
template <int kM>
__device__ __forceinline__ void split_products(float (&acc)[kM][8][4], const unsigned char* a_base,
                                               const unsigned char* b_base, int row_bytes,
                                               int steps) {
  for (int s = 0; s < steps; ++s) {
    uint32_t a[kM][4], a_lo[kM][4];
#pragma unroll
    for (int m = 0; m < kM; ++m) {
      ldmatrix_x4(a[m], a_base + m * 16 * row_bytes + s * 32);
#pragma unroll
      for (int e = 0; e < 4; ++e)
        split_tf32(a[m][e], a_lo[m][e]);
    }
#pragma unroll
    for (int np = 0; np < 4; ++np) {
      uint32_t bf[4], b_lo[4];
      ldmatrix_x4(bf, b_base + np * 16 * row_bytes + s * 32);
#pragma unroll
      for (int e = 0; e < 4; ++e)
        split_tf32(bf[e], b_lo[e]);
#pragma unroll
      for (int m = 0; m < kM; ++m) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          float(&out)[4] = acc[m][2 * np + h];
          mma<float>(out, a_lo[m], bf[2 * h], bf[2 * h + 1]);
          mma<float>(out, a[m], b_lo[2 * h], b_lo[2 * h + 1]);
          mma<float>(out, a[m], bf[2 * h], bf[2 * h + 1]);
        }
      }
    }
  }
}

/// acc = the products of a warp's 16 kM rows (a_base: the lane's ldmatrix address in them) with
/// 64 centroids (b_base: likewise), over `steps` 32-byte steps of the rows. float32 rows: with
/// `tf32`, rows rounded to TF32 (the centroids are, by operand_value) in one product; else both
/// split into TF32 parts (split_tf32) in three, on architectures with TF32 products (Turing's
/// lanes multiply whole floats).
template <typename T, int kM>
__device__ __forceinline__ void warp_products(float (&acc)[kM][8][4], const unsigned char* a_base,
                                              const unsigned char* b_base, int row_bytes, int steps,
                                              [[maybe_unused]] bool tf32) {
#pragma unroll
  for (int m = 0; m < kM; ++m) {
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e)
        acc[m][nt][e] = 0.0f;
    }
  }
#if !CUDAOPS_DEVICE_TURING
  if constexpr (std::is_same_v<T, float>) {
    if (!tf32) {
      split_products(acc, a_base, b_base, row_bytes, steps);
      return;
    }
  }
#endif
  for (int s = 0; s < steps; ++s) {
    uint32_t a[kM][4];
#pragma unroll
    for (int m = 0; m < kM; ++m) {
      ldmatrix_x4(a[m], a_base + m * 16 * row_bytes + s * 32);
      if constexpr (std::is_same_v<T, float>) {
        if (tf32) {
#pragma unroll
          for (int e = 0; e < 4; ++e)
            a[m][e] = tf32_bits(__uint_as_float(a[m][e]));
        }
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
