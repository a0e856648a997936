#pragma once

// Batched k-means: what its kernels share (included by the translation units of
// kmeans_kernels.cuh, kmeans_update.cuh and kmeans_assign.cuh): the batch's rows, a row's slice
// per lane, warp sums and the launch helpers.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "core/dispatch.cuh"
#include "core/launch.h"
#include "device/arch.cuh"
#include "device/async_copy.cuh"
#include "device/mma.cuh"
#include "device/numeric.cuh"
#include "device/shared_memory.cuh"
#include "device/warp.cuh"
#include "engine/kmeans_plan.h"

namespace cudaops::detail::kmeans {
namespace {

/// The products' scale in a score, bias - alpha * y . c: L2 2 (|c|^2 - 2 y . c), cosine 1.
__host__ __device__ inline float metric_alpha(bool cosine) {
  return cosine ? 1.0f : 2.0f;
}

/// A centroid's bias from its rounded values: L2 |c|^2 (`norm`), cosine 0, plus
/// alpha * mean . c (`shift`) where the means are folded into it (Call::fold_means; 0 otherwise).
__device__ __forceinline__ float centroid_bias(bool cosine, float norm, float shift) {
  return (cosine ? 0.0f : norm) + metric_alpha(cosine) * shift;
}

/// The point that strided initialisation (KmeansInit::kStrided) takes for centroid j of k in a
/// problem of len points: j * len / k, or -1 (a zero centroid) for a problem of none.
__device__ __forceinline__ int64_t strided_point(int64_t j, int64_t len, int64_t k) {
  return len > 0 ? j * len / k : -1;
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

/// What the assignment kernels (mma.sync and wgmma) are given.
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
  const float* means;  // [batch, d] subtracted from the points before the products (the slab
                       // kernel: in its biases, Call::fold_means), or null
  bool cosine;
  int32_t* labels;  // [batch, n]
  float* scores;    // [batch, n]
  float* point_w;   // [batch, n]: cosine 1 / |y|, L2 |y|^2 (of y as the products take it); or null
  // [batch]: 0 where no point changed cluster at the last update, so that no centroid moved and
  // the labels and scores from before stand (Call::moved); or null: every problem assigned
  const int32_t* moved;
  bool tf32;  // float32 points: single TF32 products (Call::tf32), else split ones
};

/// v with the bits of kMask (held in a register as `mask`) replaced by kTag, in one LOP3: K & (v |
/// mask) with K = ~kMask | kTag (the compiler would otherwise mask and set in two). The minimum of
/// such scores names its tag; scores within 2^-(23 - bits of kMask) of each other (relative) then
/// rank by tag rather than value, far inside the products' own rounding.
template <uint32_t kMask, uint32_t kTag>
__device__ __forceinline__ float low_bits_set(float v, uint32_t mask) {
  static_assert((kTag & ~kMask) == 0u, "the tag fits the mask");
  uint32_t out;
  asm("lop3.b32 %0, %1, %2, %3, 0xC8;\n"
      : "=r"(out)
      : "r"(__float_as_uint(v)), "n"(~kMask | kTag), "r"(mask));
  return __uint_as_float(out);
}

/// The end of an assignment kernel: the row's minimum (row_minimum) is written by the lane that
/// `writes`. With `merge`, the row's label and score are those of earlier columns, kept unless
/// beaten (a NaN score: none found yet).
template <typename T>
__device__ __forceinline__ void write_best(const AssignArgs<T>& args, int64_t b, int64_t i,
                                           int64_t len, float v, int j, bool writes,
                                           bool merge = false) {
  row_minimum(v, j);
  if (writes && i < len) {
    if (merge) {
      const float before = args.scores[b * args.rows.n + i];
      if (j == INT32_MAX || !(v < before || before != before)) return;
    }
    args.labels[b * args.rows.n + i] = j == INT32_MAX ? 0 : j;
    args.scores[b * args.rows.n + i] = j == INT32_MAX ? NAN : v;
  }
}

/// One value's part of a point's distance terms: y . c, |y|^2 and |y - c|^2.
__device__ __forceinline__ void add_distance_terms(float y, float c, float& dot, float& yy,
                                                   float& dd) {
  dot = fmaf(y, c, dot);
  yy = fmaf(y, y, yy);
  dd = fmaf(y - c, y - c, dd);
}

/// The sum of v over the kL lanes of a row's group (lanes kL-aligned); every lane gets it.
template <int kL>
__device__ __forceinline__ float group_sum(float v) {
#pragma unroll
  for (int o = kL / 2; o > 0; o >>= 1)
    v += __shfl_xor_sync(kFull, v, o);
  return v;
}

/// Each lane's acc plus the same lane's of the warp's other groups of kL lanes, the groups added
/// in a fixed order (the lower group first): every group gets the warp's sums.
template <int kL, int kN>
__device__ __forceinline__ void add_groups(float (&acc)[kN], int lane) {
#pragma unroll
  for (int o = kL; o < kWarp; o <<= 1) {
#pragma unroll
    for (int e = 0; e < kN; ++e) {
      const float other = __shfl_xor_sync(kFull, acc[e], o);
      acc[e] = (lane & o) != 0 ? other + acc[e] : acc[e] + other;
    }
  }
}

/// A point's distance to its centroid from its kL lanes' terms: L2 |y - c|^2, cosine
/// 1 - y . c / |y| (1 for a zero vector); every lane of the group gets it.
template <int kL>
__device__ __forceinline__ float group_distance(float dot, float yy, float dd, bool cosine) {
  // (The three sums interleaved, so that their shuffles overlap.)
#pragma unroll
  for (int o = kL / 2; o > 0; o >>= 1) {
    dot += __shfl_xor_sync(kFull, dot, o);
    yy += __shfl_xor_sync(kFull, yy, o);
    dd += __shfl_xor_sync(kFull, dd, o);
  }
  return cosine ? (yy > 0.0f ? 1.0f - dot / sqrtf(yy) : 1.0f) : dd;
}

/// Most values of a row each lane holds (d <= 32 * kPerLane).
constexpr int kPerLane = 16;

/// 16-bit or float32 values in one 16-byte piece of a row.
template <typename T>
constexpr int kPieceValues = 16 / static_cast<int>(sizeof(T));

/// Piece `piece` of a row of d values of T (16-byte aligned, as every row is): zeros past d; read
/// in one load where the piece lies inside d (`whole_last`: every piece of the row does).
template <typename T>
__device__ __forceinline__ uint4 load_piece(const T* row, int piece, int row_pieces,
                                            bool whole_last, int d) {
  constexpr int kV = kPieceValues<T>;
  uint4 v = make_uint4(0, 0, 0, 0);
  if (piece < row_pieces) {
    if (piece + 1 < row_pieces || whole_last) {
      v = __ldg(reinterpret_cast<const uint4*>(row) + piece);
    } else {
      T* t = reinterpret_cast<T*>(&v);
#pragma unroll
      for (int e = 0; e < kV; ++e) {
        if (piece * kV + e < d) t[e] = row[piece * kV + e];
      }
    }
  }
  return v;
}

/// Calls launch(kL, kQ) (as integral constants) for rows of d values of T read in 16-byte
/// pieces: kL lanes a row, the fewest powers of two of pieces that cover it (8 to 32), kQ pieces
/// each (2 past 32 pieces); returns what it returns.
template <typename T, typename Launch>
auto with_row_lanes(int64_t d, Launch&& launch) {
  const int64_t pieces = (d + kPieceValues<T> - 1) / kPieceValues<T>;
  if (pieces <= 8) {
    return launch(std::integral_constant<int, 8>(), std::integral_constant<int, 1>());
  } else if (pieces <= 16) {
    return launch(std::integral_constant<int, 16>(), std::integral_constant<int, 1>());
  } else if (pieces <= 32) {
    return launch(std::integral_constant<int, 32>(), std::integral_constant<int, 1>());
  }
  return launch(std::integral_constant<int, 32>(), std::integral_constant<int, 2>());
}

// ---- host
// ------------------------------------------------------------------------------------------

inline constexpr const char* kOp = "kmeans";

template <typename T>
Rows<T> rows_of(const KmeansPoints& p) {
  return Rows<T>{static_cast<const T*>(p.data), p.ld, p.batch_stride, p.n, p.offsets};
}

/// The assignment's arguments for `call`, in blocks of rows_per_block points.
template <typename T>
AssignArgs<T> assign_args(const Call& call, int64_t rows_per_block) {
  const bool cosine = call.metric == KmeansMetric::kCosine;
  return AssignArgs<T>{rows_of<T>(call.points),
                       static_cast<const T*>(call.operand),
                       call.bias,
                       call.k,
                       static_cast<int>(call.points.d),
                       static_cast<int>(call.d_pad),
                       metric_alpha(cosine),
                       (call.points.n + rows_per_block - 1) / rows_per_block,
                       call.center ? call.means : nullptr,
                       cosine,
                       call.labels,
                       call.scores,
                       call.point_w,
                       call.moved,
                       call.tf32};
}

inline Status launched(cudaStream_t stream) {
  return check_launch(kOp, stream);
}

/// Opts `kernel` in to `smem` bytes of dynamic shared memory where its total passes 48 KiB.
template <typename Kernel>
Status allow_smem(Kernel kernel, size_t smem) {
  return allow_dynamic_smem(kOp, reinterpret_cast<const void*>(kernel), smem);
}

}  // namespace
}  // namespace cudaops::detail::kmeans
