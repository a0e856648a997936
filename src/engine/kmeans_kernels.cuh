#pragma once

// Batched k-means: the kernels around the assignment and the update (prepare, initialise, operand,
// finish), launched by the host sequence of kmeans_fit.cuh; the assignment (kmeans_assign.cuh) and
// the update (kmeans_update.cuh) have files of their own.
//
// One call runs, on the caller's stream:
//   prepare:    the problems' means (center);
//   initialise: the float32 centroids (strided rows, Floyd's sample, or the ones given);
//   operand:    each centroid rounded to the points' dtype, zero-padded, and its bias (once: the
//               sums write the next ones; again after each re-seeding);
//   n_iters x:  assign (the tensor-core products fused with the arg-min: labels, scores and, for
//               kFarthest, each point's weight; the scores never in memory as a matrix; the
//               labels alternate between two buffers); mark (after the first: the clusters a
//               point joined or left since the assignment before); group (each problem's points
//               by label, in row order within a cluster: a block per problem, a counting sort by
//               warp segments); sum (a warp per marked cluster adds its points in row order: no
//               atomics, the same bits every run; an unmarked cluster's centroid stands, as
//               adding the same rows again would give it); re-seed (kFarthest);
//   finish:     unless only centroids are asked for: assign once more, each point's distance to
//               its centroid in float32 (a warp per point; only for distances or the objective),
//               then labels, sizes and the objective (summed in row order).
//
// The assignment: a block takes 32 points per warp and walks the centroids 64 at a time,
// double-buffered in shared memory (cp.async); each warp multiplies its 32 x 64 tile with
// mma.sync (16-bit: m16n8k16; float32: m16n8k8 in TF32), fragments read with ldmatrix, and keeps
// each row's running minimum of bias_j - alpha * y . c_j (y = x - mean, centred in shared memory;
// L2: bias |c|^2, alpha 2; cosine: bias 0, alpha 1), which orders the centroids as the distance
// does.
#include <utility>

#include "core/random.h"
#include "engine/kmeans_small_launch.cuh"
#include "engine/kmeans_update.cuh"

namespace cudaops::detail::kmeans {
namespace {

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
    const int64_t r = init == Init::kStrided ? strided_point(j, len, k) : drawn[item];
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
/// rounded values (centroid_bias: plus alpha * mean . c where `folded` means are given). A warp
/// per centroid.
template <typename T, typename C>
__global__ void __launch_bounds__(256)
    operand_kernel(const C* centroids, int64_t batch, int64_t k, int d, int d_pad, bool cosine,
                   bool tf32, const float* folded, T* operand, float* bias) {
  const int lane = threadIdx.x % kWarp;
  const int64_t item =
      static_cast<int64_t>(blockIdx.x) * (blockDim.x / kWarp) + threadIdx.x / kWarp;
  if (item >= batch * k) return;
  const float* mean = folded != nullptr ? folded + item / k * d : nullptr;
  float norm = 0.0f, shift = 0.0f;
  for (int e = lane; e < d_pad; e += kWarp) {
    const T v = operand_value<T>(e < d ? to_float(centroids[item * d + e]) : 0.0f, tf32);
    operand[item * d_pad + e] = v;
    const float f = to_float(v);
    norm = fmaf(f, f, norm);
    if (mean != nullptr && e < d) shift = fmaf(mean[e], f, shift);
  }
  norm = warp_sum(norm);
  shift = warp_sum(shift);
  if (lane == 0) bias[item] = centroid_bias(cosine, norm, shift);
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
  bool cosine;
  float* distances;  // [batch, n]
};

/// Each point's distance to its centroid in float32: L2 |y - c|^2, cosine 1 - y . c / |y| (1 for
/// a zero vector). kL lanes read a point's row in 16-byte pieces (kQ each) and the matching values
/// of its centroid; a warp takes 32 / kL points at a time and several of those before it adds any.
template <typename T, typename C, int kL, int kQ>
__global__ void __launch_bounds__(256) distance_kernel(DistanceArgs<T, C> args) {
  constexpr int kV = kPieceValues<T>;
  constexpr int kR = kWarp / kL;       // points per step
  constexpr int kU = kQ == 1 ? 4 : 2;  // steps loaded before any is added
  const int lane = threadIdx.x % kWarp;
  const int sub = lane / kL, part = lane % kL;
  const int64_t total = args.batch * args.rows.n;
  const int row_pieces = (args.d + kV - 1) / kV;
  const bool whole_last = args.d % kV == 0;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * (blockDim.x / kWarp);
  const int64_t warp =
      static_cast<int64_t>(blockIdx.x) * (blockDim.x / kWarp) + threadIdx.x / kWarp;
  for (int64_t p0 = warp * kR * kU; p0 < total; p0 += warps * kR * kU) {
    uint4 raw[kU][kQ];
    const C* centroid[kU];
    const float* mu[kU];
    bool valid[kU];
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      const int64_t p = p0 + u * kR + sub;
      const int64_t b = p / args.rows.n, i = p % args.rows.n;
      const T* first = nullptr;
      int64_t len = 0;
      if (p < total) args.rows.problem(b, &first, &len);
      valid[u] = p < total && i < len;
      centroid[u] = nullptr;
      mu[u] = nullptr;
      const T* row = valid[u] ? first + i * args.rows.ld : nullptr;
#pragma unroll
      for (int q = 0; q < kQ; ++q) {
        raw[u][q] = valid[u] ? load_piece(row, part + q * kL, row_pieces, whole_last, args.d)
                             : make_uint4(0, 0, 0, 0);
      }
      if (valid[u]) {
        centroid[u] = args.centroids + (b * args.k + __ldg(args.labels + p)) * args.d;
        if (args.means != nullptr) mu[u] = args.means + b * args.d;
      }
    }
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      float dot = 0.0f, yy = 0.0f, dd = 0.0f;
      if (valid[u]) {
#pragma unroll
        for (int q = 0; q < kQ; ++q) {
          const T* t = reinterpret_cast<const T*>(&raw[u][q]);
          const int c0 = (part + q * kL) * kV;
#pragma unroll
          for (int e = 0; e < kV; ++e) {
            if (c0 + e < args.d) {
              const float y = to_float(t[e]) - (mu[u] != nullptr ? __ldg(mu[u] + c0 + e) : 0.0f);
              add_distance_terms(y, to_float(centroid[u][c0 + e]), dot, yy, dd);
            }
          }
        }
      }
      const float distance = group_distance<kL>(dot, yy, dd, args.cosine);
      if (valid[u] && part == 0) args.distances[p0 + u * kR + sub] = distance;
    }
  }
}

template <typename T>
struct FinishArgs {
  Rows<T> rows;
  const int32_t* labels;   // [batch, n]
  const float* distances;  // [batch, n], or null (no objective, no distances given)
  int32_t* out_labels;     // by row of the points (offsets) or [batch, n]; may be null
  float* out_distances;    // likewise; may be null
  int32_t* sizes;          // [batch, k], zeroed; may be null
  float* objective;        // [batch]; may be null (then `parts` may exceed 1)
  int64_t k;
  int64_t parts;  // blocks a problem: each takes `per_part` of its rows
  int64_t per_part;
};

/// Labels and distances by row, sizes, and each problem's objective (its points' distances summed
/// in a fixed order by the problem's one block). Without an objective a problem's rows are split
/// over `parts` blocks (sizes by integer atomics: any order gives the same counts).
template <typename T>
__global__ void __launch_bounds__(256) finish_kernel(FinishArgs<T> args) {
  __shared__ float partial[256];
  const int64_t b = blockIdx.x / args.parts;
  const T* first;
  int64_t len;
  args.rows.problem(b, &first, &len);
  const int64_t base = args.rows.offsets != nullptr ? args.rows.offsets[b] : b * args.rows.n;
  const int64_t begin = (blockIdx.x % args.parts) * args.per_part;
  const int64_t end = min(len, begin + args.per_part);
  float sum = 0.0f;
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    const int64_t p = b * args.rows.n + i;
    const int label = args.labels[p];
    const float dist = args.distances != nullptr ? args.distances[p] : 0.0f;
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

}  // namespace
}  // namespace cudaops::detail::kmeans
