#pragma once

// Batched k-means: how a call is laid out (host only, so that the workspace size needs no GPU),
// and the typed launch entry points, built one dtype per translation unit (kmeans_<dtype>.cu).
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "core/workspace.h"
#include "cudaops/kmeans.h"
#include "cudaops/status.h"

namespace cudaops::detail::kmeans {

/// Most dimensions the tensor-core assignment takes: 512 16-bit or 256 float32 values per row.
inline constexpr int64_t kMaxRowBytes = 1024;
/// Centroids the assignment takes per step.
inline constexpr int kChunk = 64;
/// Most empty clusters re-seeded per problem and iteration (KmeansEmpty::kFarthest).
inline constexpr int kMaxReseeds = 32;
/// Most clusters per problem kmeans fits (its sort keeps a cursor per cluster in shared memory).
inline constexpr int64_t kMaxFitClusters = 32768;

/// The element size of a dtype the points may have (0 for others).
inline int64_t element_size(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return 4;
    case DType::kFloat16:
    case DType::kBFloat16:
      return 2;
    default:
      return 0;
  }
}

/// d rounded up to whole 32-byte steps of the matrix products (16 values of 16 bits, 8 of float32).
inline int64_t padded_dims(int64_t d, int64_t element) {
  const int64_t step = 32 / element;
  return (d + step - 1) / step * step;
}

/// One 256-byte aligned piece of the workspace.
/// The workspace of one call, every piece 256-byte aligned.
struct Layout {
  int64_t batch = 0, n = 0, d = 0, k = 0, d_pad = 0;
  Piece means;      // [batch, d] float32 (center)
  Piece point_w;    // [batch, n] float32: cosine 1 / |y_i| (the sums), L2 |y_i|^2 (kFarthest)
  Piece centroids;  // [batch, k, d] float32 (when the result's are not float32)
  Piece operand;    // [batch, k, d_pad] in the points' dtype (float32: TF32-rounded)
  Piece bias;       // [batch, k] float32
  Piece labels;     // [batch, n] int32
  Piece scores;     // [batch, n] float32
  Piece counts;     // [batch, k] int32
  Piece starts;     // [batch, k] int32: each cluster's first place in perm
  Piece perm;       // [batch, n] int32: each problem's rows grouped by label
  Piece prior;      // [batch, n] int32: the labels of the assignment before (fit)
  Piece dirty;      // batch x k + batch int32: clusters a row joined or left since; moved
  Piece rows;       // [batch, k] int32 (kRandom: the rows drawn)
  Piece bitmap;     // [batch, ceil(n / 32)] uint32 (kRandom)
  size_t bytes = 0;
};

/// The layout for a kmeans call (fit = true) or a kmeans_assign call (fit = false): means with
/// center, the points' weights with `weights` (a cosine fit's sums and KmeansEmpty::kFarthest's
/// re-seeding read them).
Layout make_layout(int64_t batch, int64_t n, int64_t d, int64_t k, DType dtype, bool fit,
                   bool center, bool random_init, bool own_centroids, bool weights);

/// What the typed launches need (every size checked, pointers into the workspace resolved).
struct Call {
  KmeansPoints points;
  int64_t k = 0;
  int64_t d_pad = 0;
  KmeansMetric metric = KmeansMetric::kL2;
  bool center = false;         // subtract `means` from the points
  bool compute_means = false;  // compute them first (kmeans with center)
  // Where the slab kernel assigns centred points, it takes them as given and the biases carry
  // alpha * mean . c (y . c = x . c - mean . c): set by fit and assign (assign_folds_means).
  bool fold_means = false;
  // float32 points: single TF32 products (KmeansPrecision::kTf32) rather than split ones.
  bool tf32 = false;
  float* means = nullptr;
  float* point_w = nullptr;
  float* centroids = nullptr;  // float32 working centroids
  void* operand = nullptr;
  float* bias = nullptr;
  int32_t* labels = nullptr;
  float* scores = nullptr;
  int32_t* counts = nullptr;
  int32_t* starts = nullptr;
  int32_t* perm = nullptr;
  // The iterations' labels alternate between `labels` and `prev_labels`, so that the update knows
  // which clusters' rows changed (`dirty`) and keeps the others' centroids as they are.
  int32_t* prev_labels = nullptr;
  int32_t* dirty = nullptr;
  // [batch] after dirty: whether any of a problem's points changed cluster at the last update.
  // Where none did, no centroid moved, so the grouping and the next assignment of that problem
  // are skipped (its labels, in both buffers, and its scores stand).
  int32_t* moved = nullptr;
  int32_t* rows = nullptr;
  uint32_t* bitmap = nullptr;
  // Where the small problems' kernel fits the call (kmeans_small.cuh): done[b] counts the blocks
  // of problem b that wrote its results, and *small_blocks is set to the blocks a problem (0
  // where the fit took the other kernels). Both may be null.
  int32_t* done = nullptr;
  int* small_blocks = nullptr;
};

/// The assignment of call's points to its operand's centroids: labels and scores (and point
/// weights where call.point_w is set), for points of T (kmeans_assign_<dtype>.cu).
template <typename T>
Status launch_assign(const Call& call, cudaStream_t stream);

/// Most dimensions the Hopper assignment (wgmma, sm_90a, 16-bit points) takes.
inline constexpr int64_t kWgmmaMaxDims = 256;

/// The assignment on Hopper's warpgroup MMA, for 16-bit points of at most kWgmmaMaxDims
/// dimensions on a device of compute capability 9.0 (kmeans_assign_sm90a.cuh). Sets *launched to
/// whether it launched; where it did not, the caller takes the mma.sync kernel.
template <typename T>
Status launch_assign_wgmma(const Call& call, cudaStream_t stream, bool* launched);

/// *folds = whether call's points are centred and launch_assign takes the slab kernel for them
/// (kmeans_assign_sm90a.cuh), which folds the means into the biases (Call::fold_means).
template <typename T>
Status assign_folds_means(const Call& call, bool* folds);

/// cudaops::kmeans, where in addition the small problems' kernel, if it fits the call, counts in
/// done[b] ([batch] int32, zeroed by that kernel before it lets a dependent launch start) the
/// blocks of problem b that wrote its results, and *small_blocks is set to the count each
/// reaches (0: the fit took the other kernels and done is not written).
Status kmeans_counted(const KmeansPoints& points, const KmeansParams& params,
                      const KmeansResult& result, void* d_workspace, size_t workspace_bytes,
                      int32_t* done, int* small_blocks, cudaStream_t stream);

/// kmeans for points of T (T = float, __half or __nv_bfloat16).
template <typename T>
Status fit(const Call& call, const KmeansParams& params, const KmeansResult& result,
           cudaStream_t stream);

/// kmeans_assign for points of T.
template <typename T>
Status assign(const Call& call, const KmeansCentroids& centroids, int32_t* labels, float* distances,
              cudaStream_t stream);

}  // namespace cudaops::detail::kmeans
