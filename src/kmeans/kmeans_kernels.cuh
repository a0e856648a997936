// Batched k-means: the kernels and their launch sequence, included by one translation unit per
// dtype (kmeans_<dtype>.cu).
//
// One call runs, on the caller's stream:
//   prepare:    the problems' means (center);
//   initialise: the float32 centroids (strided rows, Floyd's sample, or the ones given);
//   n_iters x:  operand (each centroid rounded to the points' dtype, zero-padded, and its bias);
//               assign (the tensor-core products fused with the arg-min: labels, scores and each
//               point's weight; the scores never in memory as a matrix); sort (each problem's
//               points grouped by label, in row order within a cluster: a block per problem, a
//               stable block radix sort per chunk); sum (a warp per cluster adds its points in
//               row order: no atomics, the same bits every run); re-seed (kFarthest);
//   finish:     operand and assign once more, each point's distance to its centroid in float32
//               (a warp per point), then labels, sizes and the objective (summed in row order).
//
// The assignment: a block takes 32 points per warp and walks the centroids 64 at a time,
// double-buffered in shared memory (cp.async); each warp multiplies its 32 x 64 tile with
// mma.sync (16-bit: m16n8k16; float32: m16n8k8 in TF32), fragments read with ldmatrix, and keeps
// each row's running minimum of bias_j - alpha * y . c_j (y = x - mean, centred in shared memory;
// L2: bias |c|^2, alpha 2; cosine: bias 0, alpha 1), which orders the centroids as the distance
// does.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cub/block/block_discontinuity.cuh>
#include <cub/block/block_radix_sort.cuh>
#include <cub/block/block_scan.cuh>

#include "core/dispatch.cuh"
#include "core/launch.h"
#include "core/launch_config.h"
#include "kmeans/kmeans_plan.h"
#include "kmeans/kmeans_random.h"

namespace cudaops::detail::kmeans {
namespace {

constexpr int kWarp = 32;
constexpr unsigned kFull = 0xffffffffu;

template <typename T>
__device__ __forceinline__ float to_float(T v) {
  if constexpr (std::is_same_v<T, float>) {
    return v;
  } else if constexpr (std::is_same_v<T, __half>) {
    return __half2float(v);
  } else {
    return __bfloat162float(v);
  }
}

template <typename T>
__device__ __forceinline__ T from_float(float v) {
  if constexpr (std::is_same_v<T, float>) {
    return v;
  } else if constexpr (std::is_same_v<T, __half>) {
    return __float2half_rn(v);
  } else {
    return __float2bfloat16_rn(v);
  }
}

/// The value the tensor cores multiply for v: v rounded to T (float32: to TF32).
template <typename T>
__device__ __forceinline__ T operand_value(float v) {
  if constexpr (std::is_same_v<T, float>) {
    uint32_t bits;
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(bits) : "f"(v));
    return __uint_as_float(bits);
  } else {
    return from_float<T>(v);
  }
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1)
    v += __shfl_xor_sync(kFull, v, o);
  return v;
}

/// The rows of the batch's problems.
template <typename T>
struct Rows {
  const T* data;
  int64_t ld;
  int64_t batch_stride;
  int64_t n;  // points per problem, or their bound with offsets
  const int64_t* offsets;

  /// Problem b's first row and length (at most n).
  __device__ __forceinline__ void problem(int64_t b, const T** first, int64_t* len) const {
    if (offsets == nullptr) {
      *first = data + b * batch_stride;
      *len = n;
    } else {
      const int64_t start = offsets[b];
      *first = data + start * ld;
      *len = min(max(offsets[b + 1] - start, int64_t{0}), n);
    }
  }
  /// Whether problem b has more rows than n (an error: its objective is NaN).
  __device__ __forceinline__ bool too_long(int64_t b) const {
    return offsets != nullptr && offsets[b + 1] - offsets[b] > n;
  }
};

// ---- prepare ---------------------------------------------------------------------------------

/// Means of 32 columns of one problem: warp w sums rows w, w + 8, ...; the 8 partial sums are
/// added in order.
template <typename T>
__global__ void __launch_bounds__(256) means_kernel(Rows<T> rows, int d, float* means) {
  __shared__ float partial[8][kWarp];
  const int column_blocks = (d + kWarp - 1) / kWarp;
  const int64_t b = blockIdx.x / column_blocks;
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int c = static_cast<int>(blockIdx.x % column_blocks) * kWarp + lane;
  const T* first;
  int64_t len;
  rows.problem(b, &first, &len);
  float s = 0.0f;
  if (c < d) {
    for (int64_t i = warp; i < len; i += 8)
      s += to_float(first[i * rows.ld + c]);
  }
  partial[warp][lane] = s;
  __syncthreads();
  if (warp == 0 && c < d) {
    float total = 0.0f;
#pragma unroll
    for (int w = 0; w < 8; ++w)
      total += partial[w][lane];
    means[b * d + c] = len > 0 ? total / static_cast<float>(len) : 0.0f;
  }
}

/// Most values of a row each lane holds (d <= 32 * kPerLane).
constexpr int kPerLane = 16;

/// Floyd's sample of min(k, len) distinct rows per problem, in the order drawn (one thread per
/// problem; bitmap zeroed).
template <typename T>
__global__ void random_rows_kernel(Rows<T> rows, int64_t batch, int64_t k, uint64_t seed,
                                   uint32_t* bitmap, int64_t words, int32_t* drawn) {
  const int64_t b = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (b >= batch) return;
  const T* first;
  int64_t len;
  rows.problem(b, &first, &len);
  uint32_t* taken = bitmap + b * words;
  const int64_t count = min(k, len);
  for (int64_t i = 0; i < count; ++i) {
    const int64_t j = len - count + i;
    const int64_t t = random_draw(seed, b, i, j);
    const bool seen = (taken[t / 32] >> (t % 32)) & 1u;
    const int64_t row = seen ? j : t;
    taken[row / 32] |= 1u << (row % 32);
    drawn[b * k + i] = static_cast<int32_t>(row);
  }
  for (int64_t i = count; i < k; ++i)
    drawn[b * k + i] = -1;
}

enum class Init { kStrided, kRandom, kGiven };

/// The initial float32 centroids: a warp per centroid. Rows are centred, and for cosine scaled to
/// unit length (a zero vector stays zero).
template <typename T, typename G>
__global__ void __launch_bounds__(256)
    init_kernel(Rows<T> rows, int d, int64_t batch, int64_t k, Init init, const int32_t* drawn,
                const G* given, const float* means, bool cosine, float* centroids) {
  const int lane = threadIdx.x % kWarp;
  const int64_t item =
      static_cast<int64_t>(blockIdx.x) * (blockDim.x / kWarp) + threadIdx.x / kWarp;
  if (item >= batch * k) return;
  const int64_t b = item / k, j = item % k;
  float* out = centroids + item * d;
  float v[kPerLane];
  if (init == Init::kGiven) {
#pragma unroll
    for (int q = 0; q < kPerLane; ++q) {
      const int e = lane + q * kWarp;
      v[q] = e < d ? to_float(given[item * d + e]) : 0.0f;
    }
  } else {
    const T* first;
    int64_t len;
    rows.problem(b, &first, &len);
    const int64_t r = init == Init::kStrided ? (len > 0 ? j * len / k : -1) : drawn[item];
#pragma unroll
    for (int q = 0; q < kPerLane; ++q) {
      const int e = lane + q * kWarp;
      v[q] = r >= 0 && e < d
                 ? to_float(first[r * rows.ld + e]) - (means != nullptr ? means[b * d + e] : 0.0f)
                 : 0.0f;
    }
  }
  float scale = 1.0f;
  if (cosine) {
    float s = 0.0f;
#pragma unroll
    for (int q = 0; q < kPerLane; ++q)
      s = fmaf(v[q], v[q], s);
    s = warp_sum(s);
    scale = s > 0.0f ? 1.0f / sqrtf(s) : 0.0f;
  }
#pragma unroll
  for (int q = 0; q < kPerLane; ++q) {
    const int e = lane + q * kWarp;
    if (e < d) out[e] = v[q] * scale;
  }
}

// ---- the operand of the products ---------------------------------------------------------------

/// Each centroid rounded to the operand type (zero-padded to d_pad) and its bias, from the
/// rounded values: L2 |c|^2, cosine 0 (the points are centred before the products). A warp per
/// centroid.
template <typename T, typename C>
__global__ void __launch_bounds__(256)
    operand_kernel(const C* centroids, int64_t batch, int64_t k, int d, int d_pad, bool cosine,
                   T* operand, float* bias) {
  const int lane = threadIdx.x % kWarp;
  const int64_t item =
      static_cast<int64_t>(blockIdx.x) * (blockDim.x / kWarp) + threadIdx.x / kWarp;
  if (item >= batch * k) return;
  float norm = 0.0f;
  for (int e = lane; e < d_pad; e += kWarp) {
    const T v = operand_value<T>(e < d ? to_float(centroids[item * d + e]) : 0.0f);
    operand[item * d_pad + e] = v;
    const float f = to_float(v);
    norm = fmaf(f, f, norm);
  }
  norm = warp_sum(norm);
  if (lane == 0) bias[item] = cosine ? 0.0f : norm;
}

// ---- the assignment
// ------------------------------------------------------------------------------

__device__ __forceinline__ uint32_t smem_address(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

/// 16 bytes from global to shared memory, of which `bytes` (0 to 16) are read and the rest zero.
__device__ __forceinline__ void copy16(void* dst, const void* src, int bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_address(dst)), "l"(src),
               "r"(bytes));
}
__device__ __forceinline__ void copy_commit() {
  asm volatile("cp.async.commit_group;\n" ::);
}
template <int N>
__device__ __forceinline__ void copy_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_address(p)));
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

template <typename T>
struct AssignArgs {
  Rows<T> rows;
  const T* operand;   // [batch, k, d_pad]
  const float* bias;  // [batch, k]
  int64_t k;
  int d;
  int d_pad;
  float alpha;
  int64_t tiles;       // blocks per problem
  const float* means;  // [batch, d] subtracted from the points before the products, or null
  bool cosine;
  int32_t* labels;  // [batch, n]
  float* scores;    // [batch, n]
  float* point_w;   // [batch, n]: cosine 1 / |y|, L2 |y|^2 (of the rounded y)
};

/// Bytes of a row of A or B in shared memory: the padded row and 16 bytes more, so that the 8
/// rows an ldmatrix reads fall in different banks.
__host__ __device__ constexpr int smem_row_bytes(int d_pad, int element) {
  return d_pad * element + 16;
}

template <int kWarps>
constexpr int kRowsPerBlock = kWarps * 32;

/// Dynamic shared memory of assign_kernel: the block's points, then two stages of centroids.
inline size_t assign_smem(int warps, int d_pad, int element) {
  return static_cast<size_t>(warps * 32 + 2 * kChunk) *
         static_cast<size_t>(smem_row_bytes(d_pad, element));
}

template <typename T, int kWarps>
__global__ void __launch_bounds__(kWarps * 32, kWarps == 8 ? 2 : 1)
    assign_kernel(AssignArgs<T> args) {
  extern __shared__ __align__(16) unsigned char smem[];
  constexpr int kM = kRowsPerBlock<kWarps>;
  constexpr int kThreads = kWarps * 32;
  const int row_bytes = smem_row_bytes(args.d_pad, sizeof(T));
  unsigned char* a_tile = smem;
  unsigned char* b_tiles = smem + kM * row_bytes;
  const int64_t b = blockIdx.x / args.tiles;
  const int64_t row0 = (blockIdx.x % args.tiles) * kM;
  const T* first;
  int64_t len;
  args.rows.problem(b, &first, &len);
  if (row0 >= len) return;
  const int chunks16 = args.d_pad * static_cast<int>(sizeof(T)) / 16;  // 16-byte pieces of a row
  const int row_valid_bytes = args.d * static_cast<int>(sizeof(T));
  // The block's points: rows past the problem's end and values past d are zero.
  for (int idx = threadIdx.x; idx < kM * chunks16; idx += kThreads) {
    const int r = idx / chunks16, q = idx % chunks16;
    const int64_t i = row0 + r;
    const int bytes = i < len ? max(0, min(16, row_valid_bytes - q * 16)) : 0;
    const unsigned char* src =
        reinterpret_cast<const unsigned char*>(bytes > 0 ? first + i * args.rows.ld : first);
    copy16(a_tile + r * row_bytes + q * 16, src + (bytes > 0 ? q * 16 : 0), bytes);
  }
  const T* operand = args.operand + b * args.k * args.d_pad;
  const int64_t n_chunks = (args.k + kChunk - 1) / kChunk;
  auto load_chunk = [&](int64_t chunk) {
    unsigned char* dst = b_tiles + (chunk & 1) * kChunk * row_bytes;
    const int64_t j0 = chunk * kChunk;
    for (int idx = threadIdx.x; idx < kChunk * chunks16; idx += kThreads) {
      const int r = idx / chunks16, q = idx % chunks16;
      const bool inside = j0 + r < args.k;
      const unsigned char* src =
          reinterpret_cast<const unsigned char*>(operand + (inside ? (j0 + r) * args.d_pad : 0));
      copy16(dst + r * row_bytes + q * 16, src + (inside ? q * 16 : 0), inside ? 16 : 0);
    }
  };
  load_chunk(0);
  copy_commit();
  copy_wait<0>();
  __syncthreads();
  if (args.means != nullptr) {
    // Centred in place, before rounding: the products then carry the precision of x - mean,
    // which a large mean (as attention keys have) would otherwise take.
    const float* mu = args.means + b * args.d;
    const int values = kM * args.d;
    for (int idx = threadIdx.x; idx < values; idx += kThreads) {
      const int r = idx / args.d, e = idx % args.d;
      if (row0 + r >= len) continue;
      T* v = reinterpret_cast<T*>(a_tile + r * row_bytes) + e;
      *v = from_float<T>(to_float(*v) - __ldg(mu + e));
    }
    __syncthreads();
  }
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  {
    // Each point's weight, from its row in shared memory (lane r of the warp: row 32 w + r).
    const int64_t i = row0 + warp * 32 + lane;
    if (i < len) {
      const T* row = reinterpret_cast<const T*>(a_tile + (warp * 32 + lane) * row_bytes);
      float s = 0.0f;
      for (int e = 0; e < args.d; ++e) {
        const float v = to_float(row[e]);
        s = fmaf(v, v, s);
      }
      args.point_w[b * args.rows.n + i] = args.cosine ? (s > 0.0f ? 1.0f / sqrtf(s) : 0.0f) : s;
    }
  }

  const int g = lane / 4, t = lane % 4;
  float best[2][2];
  int best_j[2][2];
#pragma unroll
  for (int m = 0; m < 2; ++m) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      best[m][h] = INFINITY;
      best_j[m][h] = INT32_MAX;
    }
  }
  const float* bias = args.bias + b * args.k;
  // ldmatrix addresses: A rows of this warp (lane % 16), 16-byte half (lane / 16); B rows
  // (lane % 8) + 8 * (lane / 16), half (lane / 8) % 2.
  const unsigned char* a_base = a_tile + (warp * 32 + (lane % 16)) * row_bytes + (lane / 16) * 16;
  const int b_row = (lane % 8) + 8 * (lane / 16);
  const int b_half = ((lane / 8) % 2) * 16;
  const int steps = args.d_pad * static_cast<int>(sizeof(T)) / 32;

  for (int64_t chunk = 0; chunk < n_chunks; ++chunk) {
    if (chunk + 1 < n_chunks) {
      load_chunk(chunk + 1);
      copy_commit();
      copy_wait<1>();
    } else {
      copy_wait<0>();
    }
    __syncthreads();
    const unsigned char* b_base =
        b_tiles + (chunk & 1) * kChunk * row_bytes + b_row * row_bytes + b_half;
    float acc[2][8][4];
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
    // Each row's running minimum: first the chunk's smallest score of the row, then, only where
    // it beats the running one, the first column that has it (columns in increasing order, so a
    // tie keeps the lower index).
    const int64_t j0 = chunk * kChunk;
    const bool full = j0 + kChunk <= args.k;
    float bj[8][2];
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int64_t j = j0 + nt * 8 + 2 * t + e;
        bj[nt][e] = full || j < args.k ? __ldg(bias + j) : INFINITY;
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
            low = fminf(low, fmaf(-args.alpha, acc[m][nt][2 * h + e], bj[nt][e]));
        }
        if (low < best[m][h]) {
          int at = 0;
#pragma unroll
          for (int nt = 7; nt >= 0; --nt) {
#pragma unroll
            for (int e = 1; e >= 0; --e) {
              if (fmaf(-args.alpha, acc[m][nt][2 * h + e], bj[nt][e]) == low)
                at = nt * 8 + 2 * t + e;
            }
          }
          best[m][h] = low;
          best_j[m][h] = static_cast<int>(j0) + at;
        }
      }
    }
    __syncthreads();  // the stage is refilled next
  }
  // The four lanes of a row (t = 0..3) hold its columns interleaved: the smallest, lower index
  // on a tie.
#pragma unroll
  for (int m = 0; m < 2; ++m) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float v = best[m][h];
      int j = best_j[m][h];
#pragma unroll
      for (int o = 1; o < 4; o <<= 1) {
        const float ov = __shfl_xor_sync(kFull, v, o);
        const int oj = __shfl_xor_sync(kFull, j, o);
        if (ov < v || (ov == v && oj < j)) {
          v = ov;
          j = oj;
        }
      }
      const int64_t i = row0 + warp * 32 + m * 16 + h * 8 + g;
      if (t == 0 && i < len) {
        args.labels[b * args.rows.n + i] = j == INT32_MAX ? 0 : j;
        args.scores[b * args.rows.n + i] = j == INT32_MAX ? NAN : v;
      }
    }
  }
}

// ---- the update --------------------------------------------------------------------------------

struct NotEqual {
  __device__ __forceinline__ bool operator()(uint32_t a, uint32_t b) const { return a != b; }
};
struct Larger {
  __device__ __forceinline__ int operator()(int a, int b) const { return a > b ? a : b; }
};

/// Threads and keys per thread of sort_kernel's chunks.
constexpr int kSortThreads = 1024;
constexpr int kSortItems = 4;

inline int sort_bits(int64_t k) {  // bits of the keys 0..k (k marks rows past the end)
  int bits = 1;
  while ((int64_t{1} << bits) <= k)
    ++bits;
  return bits;
}

/// Each problem's points grouped by label, in row order within a label (a block per problem):
/// counts and starts per cluster, and perm[start_c ...] the cluster's rows. A stable block radix
/// sort orders each chunk of kSortThreads * kSortItems rows by label; a cursor per cluster places
/// the chunk after the chunks before it.
template <typename T>
__global__ void __launch_bounds__(kSortThreads)
    sort_kernel(Rows<T> rows, const int32_t* labels, int64_t k, int bits, int32_t* counts,
                int32_t* starts, int32_t* perm) {
  using Sort = cub::BlockRadixSort<uint32_t, kSortThreads, kSortItems, int32_t>;
  using Scan = cub::BlockScan<int32_t, kSortThreads>;
  using Heads = cub::BlockDiscontinuity<uint32_t, kSortThreads>;
  __shared__ union {
    typename Sort::TempStorage sort;
    typename Scan::TempStorage scan;
    typename Heads::TempStorage heads;
  } storage;
  extern __shared__ int32_t cursor[];  // k
  const int64_t b = blockIdx.x;
  const T* first;
  int64_t len;
  rows.problem(b, &first, &len);
  const int32_t* lab = labels + b * rows.n;
  for (int64_t c = threadIdx.x; c < k; c += kSortThreads)
    cursor[c] = 0;
  __syncthreads();
  for (int64_t i = threadIdx.x; i < len; i += kSortThreads)
    atomicAdd(cursor + lab[i], 1);
  __syncthreads();
  // Starts: an exclusive scan of the counts, kSortThreads clusters at a time.
  int32_t carry = 0;
  for (int64_t c0 = 0; c0 < k; c0 += kSortThreads) {
    const int64_t c = c0 + threadIdx.x;
    const int32_t count = c < k ? cursor[c] : 0;
    int32_t start = 0, total = 0;
    Scan(storage.scan).ExclusiveSum(count, start, total);
    __syncthreads();
    if (c < k) {
      counts[b * k + c] = count;
      starts[b * k + c] = carry + start;
      cursor[c] = carry + start;
    }
    carry += total;
  }
  __syncthreads();
  int32_t* out = perm + b * rows.n;
  constexpr int kChunk = kSortThreads * kSortItems;
  for (int64_t base = 0; base < len; base += kChunk) {
    uint32_t key[kSortItems];
    int32_t row[kSortItems];
#pragma unroll
    for (int u = 0; u < kSortItems; ++u) {
      const int64_t i = base + threadIdx.x * kSortItems + u;
      key[u] = i < len ? static_cast<uint32_t>(lab[i]) : static_cast<uint32_t>(k);
      row[u] = static_cast<int32_t>(i);
    }
    Sort(storage.sort).Sort(key, row, 0, bits);
    __syncthreads();
    // Each key's rank in its run of equal keys: its position less the run's first.
    int head[kSortItems], tail[kSortItems];
    Heads(storage.heads).FlagHeadsAndTails(head, tail, key, NotEqual());
    __syncthreads();
    int first_of_run[kSortItems];
#pragma unroll
    for (int u = 0; u < kSortItems; ++u)
      first_of_run[u] = head[u] ? static_cast<int>(threadIdx.x) * kSortItems + u : 0;
    Scan(storage.scan).InclusiveScan(first_of_run, first_of_run, Larger());
#pragma unroll
    for (int u = 0; u < kSortItems; ++u) {
      const int position = static_cast<int>(threadIdx.x) * kSortItems + u;
      if (key[u] < k) out[cursor[key[u]] + (position - first_of_run[u])] = row[u];
    }
    __syncthreads();
    // The last of each run moves its cluster's cursor past the run.
#pragma unroll
    for (int u = 0; u < kSortItems; ++u) {
      const int position = static_cast<int>(threadIdx.x) * kSortItems + u;
      if (tail[u] && key[u] < k) cursor[key[u]] += position - first_of_run[u] + 1;
    }
    __syncthreads();
  }
}

/// Values of a row each lane holds: kQ groups of kV consecutive values (kV = 8 bytes' worth), the
/// group q of lane l at values (l + 32 q) kV; kQ = 1, 2 or 4 for rows of up to 256, 512 or 1024
/// bytes.
template <typename T, int kQ_>
struct RowSlice {
  static constexpr int kV = 8 / static_cast<int>(sizeof(T));
  static constexpr int kQ = kQ_;
  float v[kQ][kV];

  __device__ __forceinline__ void zero() {
#pragma unroll
    for (int q = 0; q < kQ; ++q) {
#pragma unroll
      for (int u = 0; u < kV; ++u)
        v[q][u] = 0.0f;
    }
  }
  /// Row `row` less `mu` (null: none), values past d zero; 8-byte loads where d allows them.
  __device__ __forceinline__ void load(const T* row, int d, bool vec, const float* mu, int lane) {
#pragma unroll
    for (int q = 0; q < kQ; ++q) {
      const int e0 = (lane + q * kWarp) * kV;
      if (vec) {
        if (e0 < d) {
          const uint2 w = __ldg(reinterpret_cast<const uint2*>(row + e0));
          const T* t = reinterpret_cast<const T*>(&w);
#pragma unroll
          for (int u = 0; u < kV; ++u)
            v[q][u] = to_float(t[u]);
        } else {
#pragma unroll
          for (int u = 0; u < kV; ++u)
            v[q][u] = 0.0f;
        }
      } else {
#pragma unroll
        for (int u = 0; u < kV; ++u)
          v[q][u] = e0 + u < d ? to_float(row[e0 + u]) : 0.0f;
      }
      if (mu != nullptr) {
#pragma unroll
        for (int u = 0; u < kV; ++u)
          v[q][u] -= e0 + u < d ? __ldg(mu + e0 + u) : 0.0f;
      }
    }
  }
  __device__ __forceinline__ float dot(const RowSlice& o) const {
    float s = 0.0f;
#pragma unroll
    for (int q = 0; q < kQ; ++q) {
#pragma unroll
      for (int u = 0; u < kV; ++u)
        s = fmaf(v[q][u], o.v[q][u], s);
    }
    return s;
  }
};

/// kQ for rows of d values of T.
template <typename T>
int slice_groups(int64_t d) {
  const int64_t bytes = d * static_cast<int64_t>(sizeof(T));
  return bytes <= 256 ? 1 : bytes <= 512 ? 2 : 4;
}

template <typename T>
struct SumArgs {
  Rows<T> rows;
  const int32_t* counts;  // [batch, k]
  const int32_t* starts;  // [batch, k]
  const int32_t* perm;    // [batch, n]
  const float* means;     // or null
  float* centroids;       // [batch, k, d]
  int64_t k;
  int64_t items;  // batch * k
  int d;
  bool vec;  // rows of d values may be read 8 bytes at a time
  bool cosine;
};

constexpr int kSumWarps = 8;

/// New centroids: a warp per cluster adds its points' working rows (y, or y / |y| for cosine) in
/// row order, and writes their mean (cosine: their sum at unit length). Empty clusters, and
/// cosine sums of zero, keep their centroid. kBatch rows are loaded before any is added.
template <typename T, int kQ>
__global__ void __launch_bounds__(kSumWarps * 32, 3) sum_kernel(SumArgs<T> args) {
  constexpr int kBatch = kQ == 1 ? 8 : kQ == 2 ? 4 : 2;
  using Slice = RowSlice<T, kQ>;
  const int lane = threadIdx.x % kWarp;
  const int64_t item = static_cast<int64_t>(blockIdx.x) * kSumWarps + threadIdx.x / kWarp;
  if (item >= args.items) return;
  const int64_t b = item / args.k;
  const int count = args.counts[item];
  if (count == 0) return;
  const int start = args.starts[item];
  const T* first;
  int64_t len;
  args.rows.problem(b, &first, &len);
  const int32_t* perm = args.perm + b * args.rows.n + start;
  const float* mu = args.means != nullptr ? args.means + b * args.d : nullptr;
  Slice acc;
  acc.zero();
  for (int p0 = 0; p0 < count; p0 += kWarp) {
    const int mine = p0 + lane < count ? __ldg(perm + p0 + lane) : 0;
    const int m = min(kWarp, count - p0);
    for (int j = 0; j < m; j += kBatch) {
      Slice rowv[kBatch];
#pragma unroll
      for (int u = 0; u < kBatch; ++u) {
        const int r = __shfl_sync(kFull, mine, (j + u) % kWarp);
        if (j + u < m) {
          rowv[u].load(first + static_cast<int64_t>(r) * args.rows.ld, args.d, args.vec, mu, lane);
        }
      }
#pragma unroll
      for (int u = 0; u < kBatch; ++u) {
        if (j + u >= m) continue;
        float scale = 1.0f;
        if (args.cosine) {
          const float s = warp_sum(rowv[u].dot(rowv[u]));
          scale = s > 0.0f ? 1.0f / sqrtf(s) : 0.0f;
        }
#pragma unroll
        for (int q = 0; q < kQ; ++q) {
#pragma unroll
          for (int e = 0; e < Slice::kV; ++e)
            acc.v[q][e] = fmaf(rowv[u].v[q][e], scale, acc.v[q][e]);
        }
      }
    }
  }
  float scale;
  if (args.cosine) {
    const float s = warp_sum(acc.dot(acc));
    if (s <= 0.0f) return;  // a zero sum keeps the centroid
    scale = 1.0f / sqrtf(s);
  } else {
    scale = 1.0f / static_cast<float>(count);
  }
  float* out = args.centroids + item * args.d;
#pragma unroll
  for (int q = 0; q < kQ; ++q) {
    const int e0 = (lane + q * kWarp) * Slice::kV;
#pragma unroll
    for (int u = 0; u < Slice::kV; ++u) {
      if (e0 + u < args.d) {
        out[e0 + u] = args.cosine ? acc.v[q][u] * scale : acc.v[q][u] / static_cast<float>(count);
      }
    }
  }
}

// ---- re-seeding empty clusters (kFarthest) -----------------------------------------------------

/// The distance of a point from its assignment's score: L2 score + |y|^2, cosine 1 + score * w.
__device__ __forceinline__ float distance_of(float score, float w, bool cosine) {
  return cosine ? fmaf(score, w, 1.0f) : score + w;
}

template <typename T>
__global__ void __launch_bounds__(256)
    reseed_kernel(Rows<T> rows, int d, int64_t k, const int32_t* counts, const float* scores,
                  const float* point_w, const float* means, bool cosine, float* centroids) {
  __shared__ int64_t empty[kMaxReseeds];
  __shared__ int64_t picked[kMaxReseeds];
  __shared__ int n_empty;
  __shared__ float warp_best[8];
  __shared__ int64_t warp_row[8];
  const int64_t b = blockIdx.x;
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  if (threadIdx.x == 0) {
    int found = 0;
    for (int64_t j = 0; j < k && found < kMaxReseeds; ++j) {
      if (counts[b * k + j] == 0) empty[found++] = j;
    }
    n_empty = found;
  }
  __syncthreads();
  const int e_count = n_empty;
  if (e_count == 0) return;
  const T* first;
  int64_t len;
  rows.problem(b, &first, &len);
  const float* sc = scores + b * rows.n;
  const float* pw = point_w + b * rows.n;
  for (int round = 0; round < e_count; ++round) {
    float best = -INFINITY;
    int64_t best_row = -1;
    for (int64_t i = threadIdx.x; i < len; i += blockDim.x) {
      bool used = false;
      for (int q = 0; q < round; ++q)
        used |= picked[q] == i;
      const float dist = distance_of(sc[i], pw[i], cosine);
      if (!used && dist > best) {  // strided order: the first of equal distances stays
        best = dist;
        best_row = i;
      }
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
      const float ov = __shfl_xor_sync(kFull, best, o);
      const int64_t orow = __shfl_xor_sync(kFull, best_row, o);
      if (orow >= 0 && (best_row < 0 || ov > best || (ov == best && orow < best_row))) {
        best = ov;
        best_row = orow;
      }
    }
    if (lane == 0) {
      warp_best[warp] = best;
      warp_row[warp] = best_row;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      float v = warp_best[0];
      int64_t r = warp_row[0];
      for (int w = 1; w < 8; ++w) {
        if (warp_row[w] >= 0 &&
            (r < 0 || warp_best[w] > v || (warp_best[w] == v && warp_row[w] < r))) {
          v = warp_best[w];
          r = warp_row[w];
        }
      }
      picked[round] = r;
    }
    __syncthreads();
    const int64_t r = picked[round];
    if (r < 0) return;  // fewer points than empty clusters
    const float w = cosine ? pw[r] : 1.0f;
    float* out = centroids + (b * k + empty[round]) * d;
    for (int e = threadIdx.x; e < d; e += blockDim.x)
      out[e] =
          (to_float(first[r * rows.ld + e]) - (means != nullptr ? means[b * d + e] : 0.0f)) * w;
    __syncthreads();
  }
}

// ---- finish
// --------------------------------------------------------------------------------------

template <typename T, typename C>
struct DistanceArgs {
  Rows<T> rows;
  const int32_t* labels;  // [batch, n]
  const C* centroids;     // [batch, k, d]
  const float* means;     // or null
  int64_t k;
  int d;
  int64_t batch;
  bool vec;
  bool cosine;
  float* distances;  // [batch, n]
};

/// Each point's distance to its centroid in float32: L2 |y - c|^2, cosine 1 - y . c / |y| (1 for
/// a zero vector). A warp takes kBatch points at a time, their rows and centroids loaded before
/// any is used.
template <typename T, typename C, int kQ>
__global__ void __launch_bounds__(256) distance_kernel(DistanceArgs<T, C> args) {
  constexpr int kBatch = kQ == 1 ? 8 : kQ == 2 ? 4 : 2;
  using Slice = RowSlice<T, kQ>;
  const int lane = threadIdx.x % kWarp;
  const int64_t total = args.batch * args.rows.n;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * (blockDim.x / kWarp) * kBatch;
  for (int64_t p0 =
           (static_cast<int64_t>(blockIdx.x) * (blockDim.x / kWarp) + threadIdx.x / kWarp) * kBatch;
       p0 < total; p0 += stride) {
    Slice y[kBatch];
    const C* c[kBatch];
    bool valid[kBatch];
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      const int64_t p = p0 + u;
      const int64_t b = p / args.rows.n, i = p % args.rows.n;
      const T* first = nullptr;
      int64_t len = 0;
      if (p < total) args.rows.problem(b, &first, &len);
      valid[u] = p < total && i < len;
      c[u] = nullptr;
      if (valid[u]) {
        y[u].load(first + i * args.rows.ld, args.d, args.vec,
                  args.means != nullptr ? args.means + b * args.d : nullptr, lane);
        c[u] = args.centroids + (b * args.k + __ldg(args.labels + p)) * args.d;
      }
    }
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      if (!valid[u]) continue;
      float dot = 0.0f, yy = 0.0f, dd = 0.0f;
#pragma unroll
      for (int q = 0; q < kQ; ++q) {
        const int e0 = (lane + q * kWarp) * Slice::kV;
#pragma unroll
        for (int e = 0; e < Slice::kV; ++e) {
          const float cv = e0 + e < args.d ? to_float(c[u][e0 + e]) : 0.0f;
          const float yv = y[u].v[q][e];
          dot = fmaf(yv, cv, dot);
          yy = fmaf(yv, yv, yy);
          dd = fmaf(yv - cv, yv - cv, dd);
        }
      }
      float dist;
      if (args.cosine) {
        dot = warp_sum(dot);
        yy = warp_sum(yy);
        dist = yy > 0.0f ? 1.0f - dot / sqrtf(yy) : 1.0f;
      } else {
        dist = warp_sum(dd);
      }
      if (lane == 0) args.distances[p0 + u] = dist;
    }
  }
}

template <typename T>
struct FinishArgs {
  Rows<T> rows;
  const int32_t* labels;   // [batch, n]
  const float* distances;  // [batch, n]
  int32_t* out_labels;     // by row of the points (offsets) or [batch, n]; may be null
  float* out_distances;    // likewise; may be null
  int32_t* sizes;          // [batch, k], zeroed; may be null
  float* objective;        // [batch]; may be null
  int64_t k;
};

/// Labels and distances by row, sizes, and each problem's objective (a block per problem, its
/// points' distances summed in a fixed order).
template <typename T>
__global__ void __launch_bounds__(256) finish_kernel(FinishArgs<T> args) {
  __shared__ float partial[256];
  const int64_t b = blockIdx.x;
  const T* first;
  int64_t len;
  args.rows.problem(b, &first, &len);
  const int64_t base = args.rows.offsets != nullptr ? args.rows.offsets[b] : b * args.rows.n;
  float sum = 0.0f;
  for (int64_t i = threadIdx.x; i < len; i += blockDim.x) {
    const int64_t p = b * args.rows.n + i;
    const int label = args.labels[p];
    const float dist = args.distances[p];
    sum += dist;
    if (args.out_labels != nullptr) args.out_labels[base + i] = label;
    if (args.out_distances != nullptr) args.out_distances[base + i] = dist;
    if (args.sizes != nullptr) atomicAdd(args.sizes + b * args.k + label, 1);
  }
  partial[threadIdx.x] = sum;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) partial[threadIdx.x] += partial[threadIdx.x + s];
    __syncthreads();
  }
  if (threadIdx.x == 0 && args.objective != nullptr) {
    args.objective[b] = args.rows.too_long(b) ? NAN : partial[0];
  }
}

/// float32 centroids to the result's dtype.
template <typename T>
__global__ void convert_kernel(const float* in, int64_t count, T* out) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    out[i] = from_float<T>(in[i]);
}

// ---- host
// ------------------------------------------------------------------------------------------

constexpr const char* kOp = "kmeans";

unsigned blocks_for(int64_t items, int64_t per_block) {
  const int64_t blocks = (items + per_block - 1) / per_block;
  return static_cast<unsigned>(std::min<int64_t>(std::max<int64_t>(blocks, 1), int64_t{1} << 30));
}

template <typename T>
Rows<T> rows_of(const KmeansPoints& p) {
  return Rows<T>{static_cast<const T*>(p.data), p.ld, p.batch_stride, p.n, p.offsets};
}

/// Whether every row may be read 8 bytes at a time up to d (RowSlice::load).
template <typename T>
bool rows_vec(const KmeansPoints& p) {
  return p.d % RowSlice<T, 1>::kV == 0;
}

Status launched(cudaStream_t stream) {
  return check_launch(kOp, stream);
}

/// Opts `kernel` in to `smem` bytes of dynamic shared memory where that passes 48 KiB.
template <typename Kernel>
Status allow_smem(Kernel kernel, size_t smem) {
  if (smem <= 48 * 1024) return Status();
  const cudaError_t error = cudaFuncSetAttribute(
      kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
  return error == cudaSuccess ? Status()
                              : cuda_status(error, kOp, "setting the shared-memory size");
}

/// Warps of the assignment's blocks (32 points each): as many as the shared memory holds for
/// rows of d_pad values (at most 8, at least 2).
inline int assign_warps(int64_t d_pad, int element) {
  for (int warps : {8, 4, 2}) {
    if (assign_smem(warps, static_cast<int>(d_pad), element) <= 200 * 1024) return warps;
  }
  return 0;
}

template <typename T, int kWarps>
Status launch_assign_warps(const AssignArgs<T>& args, int64_t batch, cudaStream_t stream) {
  const auto kernel = assign_kernel<T, kWarps>;
  const size_t smem = assign_smem(kWarps, args.d_pad, sizeof(T));
  if (Status s = allow_smem(kernel, smem); !s.ok()) return s;
  kernel<<<static_cast<unsigned>(batch * args.tiles), kWarps * 32, smem, stream>>>(args);
  return launched(stream);
}

template <typename T>
Status launch_assign(const Call& call, cudaStream_t stream) {
  const int warps = assign_warps(call.d_pad, sizeof(T));
  AssignArgs<T> args{rows_of<T>(call.points),
                     static_cast<const T*>(call.operand),
                     call.bias,
                     call.k,
                     static_cast<int>(call.points.d),
                     static_cast<int>(call.d_pad),
                     call.metric == KmeansMetric::kCosine ? 1.0f : 2.0f,
                     (call.points.n + warps * 32 - 1) / (warps * 32),
                     call.center ? call.means : nullptr,
                     call.metric == KmeansMetric::kCosine,
                     call.labels,
                     call.scores,
                     call.point_w};
  switch (warps) {
    case 8:
      return launch_assign_warps<T, 8>(args, call.points.batch, stream);
    case 4:
      return launch_assign_warps<T, 4>(args, call.points.batch, stream);
    default:
      return launch_assign_warps<T, 2>(args, call.points.batch, stream);
  }
}

template <typename T, typename C>
Status launch_operand(const Call& call, const C* centroids, cudaStream_t stream) {
  const int64_t items = call.points.batch * call.k;
  operand_kernel<T, C><<<blocks_for(items, 8), 256, 0, stream>>>(
      centroids, call.points.batch, call.k, static_cast<int>(call.points.d),
      static_cast<int>(call.d_pad), call.metric == KmeansMetric::kCosine,
      static_cast<T*>(call.operand), call.bias);
  return launched(stream);
}

template <typename T>
Status launch_update(const Call& call, cudaStream_t stream) {
  const KmeansPoints& p = call.points;
  const auto sort = sort_kernel<T>;
  const size_t smem = static_cast<size_t>(call.k) * sizeof(int32_t);
  if (Status s = allow_smem(sort, smem); !s.ok()) return s;
  sort<<<static_cast<unsigned>(p.batch), kSortThreads, smem, stream>>>(
      rows_of<T>(p), call.labels, call.k, sort_bits(call.k), call.counts, call.starts, call.perm);
  if (Status s = launched(stream); !s.ok()) return s;
  SumArgs<T> args{rows_of<T>(p),
                  call.counts,
                  call.starts,
                  call.perm,
                  call.center ? call.means : nullptr,
                  call.centroids,
                  call.k,
                  p.batch * call.k,
                  static_cast<int>(p.d),
                  rows_vec<T>(p),
                  call.metric == KmeansMetric::kCosine};
  const unsigned blocks = blocks_for(args.items, kSumWarps);
  switch (slice_groups<T>(p.d)) {
    case 1:
      sum_kernel<T, 1><<<blocks, kSumWarps * 32, 0, stream>>>(args);
      break;
    case 2:
      sum_kernel<T, 2><<<blocks, kSumWarps * 32, 0, stream>>>(args);
      break;
    default:
      sum_kernel<T, 4><<<blocks, kSumWarps * 32, 0, stream>>>(args);
      break;
  }
  return launched(stream);
}

/// Distances of every point to its centroid, then labels (and distances) by row, sizes and the
/// objective.
template <typename T, typename C>
Status launch_finish(const Call& call, const C* centroids, int32_t* out_labels,
                     float* out_distances, int32_t* sizes, float* objective, cudaStream_t stream) {
  const KmeansPoints& p = call.points;
  DistanceArgs<T, C> distance{rows_of<T>(p),
                              call.labels,
                              centroids,
                              call.center ? call.means : nullptr,
                              call.k,
                              static_cast<int>(p.d),
                              p.batch,
                              rows_vec<T>(p),
                              call.metric == KmeansMetric::kCosine,
                              call.scores};
  const unsigned blocks = blocks_for(p.batch * p.n, 8 * 8);
  switch (slice_groups<T>(p.d)) {
    case 1:
      distance_kernel<T, C, 1><<<blocks, 256, 0, stream>>>(distance);
      break;
    case 2:
      distance_kernel<T, C, 2><<<blocks, 256, 0, stream>>>(distance);
      break;
    default:
      distance_kernel<T, C, 4><<<blocks, 256, 0, stream>>>(distance);
      break;
  }
  if (Status s = launched(stream); !s.ok()) return s;
  if (sizes != nullptr) {
    const size_t bytes = static_cast<size_t>(p.batch * call.k) * sizeof(int32_t);
    if (const cudaError_t error = cudaMemsetAsync(sizes, 0, bytes, stream); error != cudaSuccess)
      return cuda_status(error, kOp, "clearing the sizes");
  }
  FinishArgs<T> args{rows_of<T>(p), call.labels, call.scores, out_labels,
                     out_distances, sizes,       objective,   call.k};
  finish_kernel<T><<<static_cast<unsigned>(p.batch), 256, 0, stream>>>(args);
  return launched(stream);
}

}  // namespace

template <typename T>
Status fit(const Call& call, const KmeansParams& params, const KmeansResult& result,
           cudaStream_t stream) {
  const KmeansPoints& p = call.points;
  const int d = static_cast<int>(p.d);
  const bool cosine = call.metric == KmeansMetric::kCosine;
  const float* means = call.center ? call.means : nullptr;
  if (call.compute_means) {
    means_kernel<T><<<static_cast<unsigned>((d + 31) / 32 * p.batch), 256, 0, stream>>>(
        rows_of<T>(p), d, call.means);
    if (Status s = launched(stream); !s.ok()) return s;
  }
  const int64_t items = p.batch * call.k;
  Init init = Init::kStrided;
  if (params.init == KmeansInit::kRandom) {
    init = Init::kRandom;
    const int64_t words = (p.n + 31) / 32;
    if (const cudaError_t error = cudaMemsetAsync(
            call.bitmap, 0, static_cast<size_t>(p.batch * words) * sizeof(uint32_t), stream);
        error != cudaSuccess) {
      return cuda_status(error, kOp, "clearing the sample's bitmap");
    }
    random_rows_kernel<T><<<blocks_for(p.batch, 128), 128, 0, stream>>>(
        rows_of<T>(p), p.batch, call.k, params.seed, call.bitmap, words, call.rows);
    if (Status s = launched(stream); !s.ok()) return s;
  } else if (params.init == KmeansInit::kGiven) {
    init = Init::kGiven;
  }
  if (init == Init::kGiven && result.centroid_dtype != DType::kFloat32) {
    init_kernel<T, T><<<blocks_for(items, 8), 256, 0, stream>>>(
        rows_of<T>(p), d, p.batch, call.k, init, call.rows, static_cast<const T*>(result.centroids),
        means, cosine, call.centroids);
  } else {
    init_kernel<T, float><<<blocks_for(items, 8), 256, 0, stream>>>(
        rows_of<T>(p), d, p.batch, call.k, init, call.rows,
        static_cast<const float*>(result.centroids), means, cosine, call.centroids);
  }
  if (Status s = launched(stream); !s.ok()) return s;

  for (int iter = 0; iter < params.n_iters; ++iter) {
    if (Status s = launch_operand<T, float>(call, call.centroids, stream); !s.ok()) return s;
    if (Status s = launch_assign<T>(call, stream); !s.ok()) return s;
    if (Status s = launch_update<T>(call, stream); !s.ok()) return s;
    if (params.empty == KmeansEmpty::kFarthest) {
      reseed_kernel<T><<<static_cast<unsigned>(p.batch), 256, 0, stream>>>(
          rows_of<T>(p), d, call.k, call.counts, call.scores, call.point_w, means, cosine,
          call.centroids);
      if (Status s = launched(stream); !s.ok()) return s;
    }
  }
  if (Status s = launch_operand<T, float>(call, call.centroids, stream); !s.ok()) return s;
  if (Status s = launch_assign<T>(call, stream); !s.ok()) return s;
  if (Status s = launch_finish<T, float>(call, call.centroids, result.labels, nullptr, result.sizes,
                                         result.objective, stream);
      !s.ok())
    return s;
  if (result.centroid_dtype != DType::kFloat32) {
    convert_kernel<T><<<blocks_for(items * d, 256), 256, 0, stream>>>(
        call.centroids, items * d, static_cast<T*>(result.centroids));
    if (Status s = launched(stream); !s.ok()) return s;
  }
  return Status();
}

template <typename T>
Status assign(const Call& call, const KmeansCentroids& centroids, int32_t* labels, float* distances,
              cudaStream_t stream) {
  if (centroids.dtype == DType::kFloat32) {
    const auto* c = static_cast<const float*>(centroids.data);
    if (Status s = launch_operand<T, float>(call, c, stream); !s.ok()) return s;
    if (Status s = launch_assign<T>(call, stream); !s.ok()) return s;
    return launch_finish<T, float>(call, c, labels, distances, nullptr, nullptr, stream);
  }
  const auto* c = static_cast<const T*>(centroids.data);
  if (Status s = launch_operand<T, T>(call, c, stream); !s.ok()) return s;
  if (Status s = launch_assign<T>(call, stream); !s.ok()) return s;
  return launch_finish<T, T>(call, c, labels, distances, nullptr, nullptr, stream);
}

}  // namespace cudaops::detail::kmeans

#define CUDAOPS_KMEANS_INSTANTIATE(T)                                                              \
  template cudaops::Status cudaops::detail::kmeans::fit<T>(const Call&, const KmeansParams&,       \
                                                           const KmeansResult&, cudaStream_t);     \
  template cudaops::Status cudaops::detail::kmeans::assign<T>(const Call&, const KmeansCentroids&, \
                                                              int32_t*, float*, cudaStream_t);
