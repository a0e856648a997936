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

/// acc += a . b over one 32-byte step of k (16 values of 16 bits, 8 of TF32).
template <typename T>
__device__ __forceinline__ void mma(float (&acc)[4], const uint32_t (&a)[4], uint32_t b0,
                                    uint32_t b1) {
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
}

/// Bytes of a row of A or B in shared memory: the padded row and 16 bytes more, so that the 8
/// rows an ldmatrix reads fall in different banks.
__host__ __device__ constexpr int smem_row_bytes(int d_pad, int element) {
  return d_pad * element + 16;
}

/// acc = the products of a warp's 32 rows (a_base: the lane's ldmatrix address in them) with 64
/// centroids (b_base: likewise), over `steps` 32-byte steps of the rows.
template <typename T>
__device__ __forceinline__ void warp_products(float (&acc)[2][8][4], const unsigned char* a_base,
                                              const unsigned char* b_base, int row_bytes,
                                              int steps) {
#pragma unroll
  for (int m = 0; m < 2; ++m) {
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e)
        acc[m][nt][e] = 0.0f;
    }
  }
  for (int s = 0; s < steps; ++s) {
    uint32_t a[2][4];
#pragma unroll
    for (int m = 0; m < 2; ++m) {
      ldmatrix_x4(a[m], a_base + m * 16 * row_bytes + s * 32);
      if constexpr (std::is_same_v<T, float>) {
#pragma unroll
        for (int e = 0; e < 4; ++e)
          asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(a[m][e]) : "f"(__uint_as_float(a[m][e])));
      }
    }
#pragma unroll
    for (int np = 0; np < 4; ++np) {
      uint32_t bf[4];
      ldmatrix_x4(bf, b_base + np * 16 * row_bytes + s * 32);
#pragma unroll
      for (int m = 0; m < 2; ++m) {
        mma<T>(acc[m][2 * np], a[m], bf[0], bf[1]);
        mma<T>(acc[m][2 * np + 1], a[m], bf[2], bf[3]);
      }
    }
  }
}

/// The running minima of a warp's rows before any centroid: none (score infinite, index
/// INT32_MAX).
__device__ __forceinline__ void no_minimum(float (&best)[2][2], int (&best_j)[2][2]) {
#pragma unroll
  for (int m = 0; m < 2; ++m) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      best[m][h] = INFINITY;
      best_j[m][h] = INT32_MAX;
    }
  }
}

/// Each row's running minimum over a chunk of 64 centroids from j0 (bias_of(c): the bias of
/// centroid j0 + c, infinite past the last): first the chunk's smallest score of the row, then,
/// only where it beats the running one, the first column that has it (columns in increasing
/// order, so a tie keeps the lower index). Lane t % 4 holds columns 2 t, 2 t + 1 of each 8.
template <typename Bias>
__device__ __forceinline__ void chunk_minimum(const float (&acc)[2][8][4], Bias bias_of,
                                              float alpha, int t, int j0, float (&best)[2][2],
                                              int (&best_j)[2][2]) {
  float bj[8][2];
#pragma unroll
  for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      bj[nt][e] = bias_of(nt * 8 + 2 * t + e);
    }
  }
#pragma unroll
  for (int m = 0; m < 2; ++m) {
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

}  // namespace
}  // namespace cudaops::detail::kmeans
