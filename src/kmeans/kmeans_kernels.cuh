// Batched k-means: the launch sequence of a call and the kernels around the assignment and the
// update, included by one translation unit per dtype (kmeans_<dtype>.cu); the assignment
// (kmeans_assign.cuh) and the update (kmeans_update.cuh) have files of their own.
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

#include "kmeans/kmeans_random.h"
#include "kmeans/kmeans_small_launch.cuh"
#include "kmeans/kmeans_update.cuh"

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
                   const float* folded, T* operand, float* bias) {
  const int lane = threadIdx.x % kWarp;
  const int64_t item =
      static_cast<int64_t>(blockIdx.x) * (blockDim.x / kWarp) + threadIdx.x / kWarp;
  if (item >= batch * k) return;
  const float* mean = folded != nullptr ? folded + item / k * d : nullptr;
  float norm = 0.0f, shift = 0.0f;
  for (int e = lane; e < d_pad; e += kWarp) {
    const T v = operand_value<T>(e < d ? to_float(centroids[item * d + e]) : 0.0f);
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

template <typename T, typename C>
Status launch_operand(const Call& call, const C* centroids, cudaStream_t stream) {
  const int64_t items = call.points.batch * call.k;
  const bool cosine = call.metric == KmeansMetric::kCosine;
  operand_kernel<T, C><<<blocks_for(items, 8), 256, 0, stream>>>(
      centroids, call.points.batch, call.k, static_cast<int>(call.points.d),
      static_cast<int>(call.d_pad), cosine, call.fold_means ? call.means : nullptr,
      static_cast<T*>(call.operand), call.bias);
  return launched(stream);
}

/// Labels and distances by row (from call.labels and call.scores), sizes and the objective; the
/// distances are not read where neither they nor the objective are asked for.
template <typename T>
Status launch_results(const Call& call, int32_t* out_labels, float* out_distances, int32_t* sizes,
                      float* objective, cudaStream_t stream) {
  const KmeansPoints& p = call.points;
  if (sizes != nullptr) {
    const size_t bytes = static_cast<size_t>(p.batch * call.k) * sizeof(int32_t);
    if (const cudaError_t error = cudaMemsetAsync(sizes, 0, bytes, stream); error != cudaSuccess)
      return cuda_status(error, kOp, "clearing the sizes");
  }
  const bool distances = out_distances != nullptr || objective != nullptr;
  // A block per 4096 rows where no objective is summed (the global pass of the IVF build: 32
  // problems of 131072 rows would be 32 blocks).
  const int64_t per_part = objective != nullptr ? std::max<int64_t>(p.n, 1) : 4096;
  const int64_t parts = (std::max<int64_t>(p.n, 1) + per_part - 1) / per_part;
  FinishArgs<T> args{rows_of<T>(p), call.labels,   distances ? call.scores : nullptr,
                     out_labels,    out_distances, sizes,
                     objective,     call.k,        parts,
                     per_part};
  finish_kernel<T><<<blocks_for(p.batch * parts, 1), 256, 0, stream>>>(args);
  return launched(stream);
}

/// Distances of every point to its centroid, then labels (and distances) by row, sizes and the
/// objective. Without distances or an objective to give (the IVF build's calls), no distances.
template <typename T, typename C>
Status launch_finish(const Call& call, const C* centroids, int32_t* out_labels,
                     float* out_distances, int32_t* sizes, float* objective, cudaStream_t stream) {
  const KmeansPoints& p = call.points;
  if (out_distances == nullptr && objective == nullptr) {
    return launch_results<T>(call, out_labels, nullptr, sizes, nullptr, stream);
  }
  const DistanceArgs<T, C> distance{
      rows_of<T>(p), call.labels,           centroids, call.center ? call.means : nullptr,
      call.k,        static_cast<int>(p.d), p.batch,   call.metric == KmeansMetric::kCosine,
      call.scores};
  with_row_lanes<T>(p.d, [&](auto lanes, auto pieces) {
    constexpr int kL = decltype(lanes)::value, kQ = decltype(pieces)::value;
    const int64_t per_block = 8 * (kWarp / kL) * (kQ == 1 ? 4 : 2);  // points a block takes
    distance_kernel<T, C, kL, kQ>
        <<<blocks_for(p.batch * p.n, per_block), 256, 0, stream>>>(distance);
  });
  if (Status s = launched(stream); !s.ok()) return s;
  return launch_results<T>(call, out_labels, out_distances, sizes, objective, stream);
}

/// call with fold_means set where its assignment takes the slab kernel (sm_90a, 16-bit points).
template <typename T>
Status with_folded_means(const Call& given, Call* call) {
  *call = given;
#if !defined(CUDAOPS_NO_SM90A)
  if constexpr (!std::is_same_v<T, float>) return assign_folds_means<T>(given, &call->fold_means);
#endif
  return Status();
}

}  // namespace

template <typename T>
Status fit(const Call& given, const KmeansParams& params, const KmeansResult& result,
           cudaStream_t stream) {
  Call call;
  if (Status s = with_folded_means<T>(given, &call); !s.ok()) return s;
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
  // Small problems run every iteration, and the last assignment, in one launch
  // (kmeans_small.cuh).
  SmallPlan small;
  if (params.empty == KmeansEmpty::kKeep && params.n_iters > 0) {
    if (Status s = plan_small_fit<T>(call, &small); !s.ok()) return s;
  }
  const int small_blocks = small.blocks;
  if (call.small_blocks != nullptr) *call.small_blocks = small_blocks;
  // The small problems' kernel takes strided initial centroids itself (a launch less).
  const bool strided_init = small_blocks > 0 && init == Init::kStrided;
  if (!strided_init) {
    if (init == Init::kGiven && result.centroid_dtype != DType::kFloat32) {
      init_kernel<T, T><<<blocks_for(items, 8), 256, 0, stream>>>(
          rows_of<T>(p), d, p.batch, call.k, init, call.rows,
          static_cast<const T*>(result.centroids), means, cosine, call.centroids);
    } else {
      init_kernel<T, float><<<blocks_for(items, 8), 256, 0, stream>>>(
          rows_of<T>(p), d, p.batch, call.k, init, call.rows,
          static_cast<const float*>(result.centroids), means, cosine, call.centroids);
    }
    if (Status s = launched(stream); !s.ok()) return s;
  }
  // The points' weights do not change: written once, then reused. Cosine's by the first update's
  // sums (they read every row; the slab kernel's producer would take twice as long), L2's (for
  // re-seeding) by the first assignment.
  Call first = call, again = call;
  if (cosine) first.point_w = nullptr;
  again.point_w = nullptr;
  again.moved = nullptr;  // (every assignment but the loop's own, below, assigns every problem)
  // Labels alone are written by the small problems' kernel where they go.
  const bool labels_alone =
      result.labels != nullptr && result.sizes == nullptr && result.objective == nullptr;
  if (small_blocks > 0) {
    // The points' distances only where the objective is asked for.
    if (Status s = launch_small_fit<T>(
            call, params.n_iters, small, strided_init, result.objective != nullptr,
            labels_alone ? result.labels : nullptr, !full_updates(), stream);
        !s.ok())
      return s;
  }
  // The operand rows of the initial centroids; then each update's sums write those of the new
  // ones, except where empty clusters are re-seeded after them.
  const bool reseeds = params.empty == KmeansEmpty::kFarthest;
  const bool marks = small_blocks == 0 && marks_changes(call);
  if (small_blocks == 0) {
    if (Status s = launch_operand<T, float>(call, call.centroids, stream); !s.ok()) return s;
  }
  for (int iter = 0; small_blocks == 0 && iter < params.n_iters; ++iter) {
    // Odd iterations assign into prev_labels, so that each update has the assignment before.
    Call step = iter == 0 ? first : again, update = call;
    // From the third on, a problem none of whose points changed at the last update keeps its
    // labels and scores (no centroid moved); not where re-seeding may move its empty clusters'.
    step.moved = iter >= 2 && !reseeds && marks ? call.moved : nullptr;
    if (iter % 2 == 1 && call.prev_labels != nullptr) {
      std::swap(step.labels, step.prev_labels);
      std::swap(update.labels, update.prev_labels);
    }
    if (Status s = launch_assign<T>(step, stream); !s.ok()) return s;
    if (Status s = launch_update<T>(update, !reseeds, iter > 0 && marks, stream); !s.ok()) return s;
    if (reseeds) {
      reseed_kernel<T><<<static_cast<unsigned>(p.batch), 256, 0, stream>>>(
          rows_of<T>(p), d, call.k, call.counts, call.scores, call.point_w, means, cosine,
          call.centroids);
      if (Status s = launched(stream); !s.ok()) return s;
      if (Status s = launch_operand<T, float>(call, call.centroids, stream); !s.ok()) return s;
    }
  }
  // Nothing of the last assignment is asked for (the IVF build's global pass assigns again).
  const bool last =
      result.labels != nullptr || result.sizes != nullptr || result.objective != nullptr;
  if (small_blocks > 0) {
    // The last assignment and the distances were the small problems' kernel's (and labels
    // alone are already where they go).
    if (last && !labels_alone) {
      if (Status s = launch_results<T>(call, result.labels, nullptr, result.sizes, result.objective,
                                       stream);
          !s.ok())
        return s;
    }
  } else if (last) {
    if (Status s = launch_assign<T>(again, stream); !s.ok()) return s;
    if (Status s = launch_finish<T, float>(call, call.centroids, result.labels, nullptr,
                                           result.sizes, result.objective, stream);
        !s.ok())
      return s;
  }
  if (result.centroid_dtype != DType::kFloat32) {
    convert_kernel<T><<<blocks_for(items * d, 256), 256, 0, stream>>>(
        call.centroids, items * d, static_cast<T*>(result.centroids));
    if (Status s = launched(stream); !s.ok()) return s;
  }
  return Status();
}

template <typename T>
Status assign(const Call& given, const KmeansCentroids& centroids, int32_t* labels,
              float* distances, cudaStream_t stream) {
  Call call;
  if (Status s = with_folded_means<T>(given, &call); !s.ok()) return s;
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
