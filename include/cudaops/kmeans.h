#pragma once

#include <cstddef>
#include <cstdint>

#include "cudaops/dtype.h"
#include "cudaops/export.h"
#include "cudaops/status.h"
#include "cudaops/stream.h"

namespace cudaops {

// Batched k-means: many independent problems (e.g. every attention head and segment of a key
// cache) fitted in one call, the point-by-centroid scores computed on the tensor cores and never
// written to memory.
//
// - Problem b's points are rows of a row-major matrix: a strided batch (row i of problem b at
//   data + b * batch_stride + i * ld elements), or, with `offsets`, rows offsets[b] to
//   offsets[b + 1] - 1 of one [rows, ld] matrix (problems of different lengths, as cu_seqlens).
// - Points are float16, bfloat16 or float32; the products run on the tensor cores with float32
//   accumulation, everything else (means, norms, sums, centroids) in float32. float32 points'
//   products are exact to about float32's precision by default (each operand split into two TF32
//   parts, three products: KmeansPrecision::kExact), or single TF32 products on request (kTf32:
//   10 mantissa bits, a third of the tensor-core work; `cudaops bench kmeans` times both). Compute
//   capability 7.5 or newer (kNotSupported before); on 7.5 (Turing), which has no bfloat16 or TF32
//   tensor-core products, those two run on the CUDA cores, slowly.
// - Each problem, with z_i its working points (x_i; x_i - mean with `center`; x_i - means[b] with
//   KmeansParams::means; cosine: z_i scaled to unit length, a zero vector staying zero):
//     1. initial centroids: kStrided, z at rows floor(j * n / n_clusters); kRandom, n_clusters
//        distinct rows drawn by Floyd's algorithm from a generator seeded with (seed, b);
//        kGiven, the centroids passed in (cosine: scaled to unit length);
//     2. n_iters times: every point takes the centroid of the smallest distance (L2: squared
//        Euclidean; cosine: 1 - z_i . c_j), ties to the lower index (one exception: see
//        kmeans_assign); then each centroid becomes the mean of its points (cosine: their sum
//        scaled to unit length). A centroid with no points is kept (kKeep) or, with kFarthest,
//        the empty centroids of a problem (at most 32 per iteration, in index order) take the
//        points farthest from their centroids, farthest first (ties to the lower row), each
//        point once;
//     3. a last assignment against the returned centroids gives the labels, the cluster sizes and
//        the objective (the sum of the points' distances); not run when none of the three is
//        asked for (centroids alone).
//   The centroids are in the working space: with `center`, relative to the mean (written to
//   `means` when given); with KmeansParams::means, relative to those means.
// - Bitwise repeatable: every sum is taken in a fixed order, with no atomics on the results.
// - The outputs and the workspace must not overlap the inputs or one another (kInvalidArgument;
//   points given by offsets are not checked, their extent being on the device).
// - Asynchronous on `stream`, nothing allocated or synchronised; the workspace is the caller's
//   (kmeans_workspace_size), so calls can be captured in a CUDA graph.

enum class KmeansMetric : int {
  kL2 = 0,      ///< squared Euclidean distance; centroids are means
  kCosine = 1,  ///< spherical k-means: unit points and centroids, largest inner product
};

enum class KmeansInit : int {
  kStrided = 0,  ///< evenly strided points: deterministic, no seed
  kRandom = 1,   ///< a seeded sample of distinct points
  kGiven = 2,    ///< the centroids passed in KmeansResult::centroids
};

enum class KmeansEmpty : int {
  kKeep = 0,      ///< an empty cluster keeps its centroid
  kFarthest = 1,  ///< empty clusters take the points farthest from their centroids
};

/// The products of float32 points (16-bit points ignore it: their products are exact in float32).
enum class KmeansPrecision : int {
  kExact = 0,  ///< about float32's precision: x = hi + lo in TF32, x . c = hi.hi + hi.lo + lo.hi
  kTf32 = 1,   ///< TF32 products (points and centroids rounded to 10 mantissa bits), as torch's
               ///< allow_tf32
};

/// The points of a batch of problems.
struct KmeansPoints {
  const void* data = nullptr;  ///< device memory, 16-byte aligned
  DType dtype = DType::kFloat16;
  int64_t batch = 1;  ///< number of problems
  /// Points per problem; with `offsets`, the most points of any problem (it sizes the launch and
  /// the workspace; a problem longer than this is an error reported as NaN objectives).
  int64_t n = 0;
  int64_t d = 0;             ///< dimensions, 1 to 512
  int64_t ld = 0;            ///< row stride in elements (0: d); ld * element size a multiple of 16
  int64_t batch_stride = 0;  ///< elements between problems (0: n * ld); ignored with offsets
  const int64_t* offsets = nullptr;  ///< device, batch + 1 row offsets, or null (strided batch)
};

/// How to fit.
struct KmeansParams {
  int64_t n_clusters = 0;  ///< clusters per problem, 1 to n (a problem of fewer points with
                           ///< offsets leaves the extra clusters empty)
  int n_iters = 10;        ///< iterations of assignment and update, >= 0
  KmeansMetric metric = KmeansMetric::kL2;
  bool center = false;  ///< subtract each problem's mean from its points first
  /// Device, [batch, d] float32: subtracted from each problem's points in place of its own mean
  /// (as `center` does, with these means), e.g. one mean shared by the segments of a head given as
  /// separate problems; or null. Not with `center`.
  const float* means = nullptr;
  KmeansInit init = KmeansInit::kStrided;
  uint64_t seed = 0;  ///< kRandom only
  KmeansEmpty empty = KmeansEmpty::kKeep;
  KmeansPrecision precision = KmeansPrecision::kExact;  ///< float32 points' products
};

/// Where the results go. Null pointers other than `centroids` are not written.
struct KmeansResult {
  /// [batch, n_clusters, d] in centroid_dtype; with KmeansInit::kGiven, the initial centroids on
  /// entry (in the same dtype).
  void* centroids = nullptr;
  DType centroid_dtype = DType::kFloat32;  ///< float32, or the points' dtype
  int32_t* labels = nullptr;               ///< [batch, n] (with offsets: one per row of the matrix)
  int32_t* sizes = nullptr;                ///< [batch, n_clusters] points per cluster
  float* objective = nullptr;  ///< [batch] sum of the points' distances to their centroids
  float* means = nullptr;      ///< [batch, d] the means subtracted (with `center`), float32
};

/// Bytes of workspace kmeans needs for these points and parameters (no device needed).
CUDAOPS_EXPORT Status kmeans_workspace_size(const KmeansPoints& points, const KmeansParams& params,
                                            size_t* bytes);

/// Fits every problem of `points` (see above). d_workspace: kmeans_workspace_size bytes, 256-byte
/// aligned.
CUDAOPS_EXPORT Status kmeans(const KmeansPoints& points, const KmeansParams& params,
                             const KmeansResult& result, void* d_workspace, size_t workspace_bytes,
                             cudaStream_t stream);

/// Centroids to assign points to, as kmeans returns them.
struct KmeansCentroids {
  const void* data = nullptr;     ///< device, [batch, n_clusters, d]
  DType dtype = DType::kFloat32;  ///< float32 or the points' dtype
  int64_t n_clusters = 0;
  const float* means = nullptr;  ///< [batch, d] subtracted from the points first, or null
};

/// Bytes of workspace kmeans_assign needs (no device needed).
CUDAOPS_EXPORT Status kmeans_assign_workspace_size(const KmeansPoints& points,
                                                   const KmeansCentroids& centroids,
                                                   KmeansMetric metric, size_t* bytes);

/// The nearest centroid of every point (the metric of kmeans, ties to the lower index):
/// labels [batch, n] and, when not null, the distances [batch, n] (float32) as kmeans defines
/// them. float32 points' products are KmeansPrecision::kExact's. Cosine centroids are used as
/// given (kmeans returns them at unit length). The exception
/// to the tie rule: on compute capability 9.0, 16-bit points of up to 128 dimensions against
/// more than 128 centroids rank scores within 2^-16 of each other (relative, far inside the
/// 16-bit products' rounding) by position rather than value; the label is then either of them,
/// the same one every run.
CUDAOPS_EXPORT Status kmeans_assign(const KmeansPoints& points, const KmeansCentroids& centroids,
                                    KmeansMetric metric, int32_t* d_labels, float* d_distances,
                                    void* d_workspace, size_t workspace_bytes, cudaStream_t stream);

}  // namespace cudaops
