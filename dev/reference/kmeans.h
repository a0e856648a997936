#pragma once

// The reference of batched k-means: the semantics of cudaops/kmeans.h in double precision on the
// host, with the same initial centroids (strided, Floyd's sample from the same generator, or
// given) and the same tie and empty-cluster rules.
#include <cstdint>
#include <vector>

#include "cudaops/kmeans.h"
#include "reference/host_array.h"

namespace cudaops::ref {

struct KmeansReference {
  std::vector<double> centroids;  ///< [batch, k, d]
  std::vector<int32_t> labels;    ///< [batch, n]: problem b's row i at b * n + i
  std::vector<int32_t> sizes;     ///< [batch, k]
  std::vector<double> objective;  ///< [batch]
  std::vector<double> means;      ///< [batch, d] (zeros without center)
  /// [batch, n]: the final assignment's second smallest distance minus the smallest; a label
  /// computed in lower precision may differ where this is small.
  std::vector<double> margins;
  std::vector<double> distances;  ///< [batch, n] the final distances
  std::vector<int32_t> second;    ///< [batch, n] the final assignment's second nearest centroid
  /// [batch, n] (kmeans_assign with labels): each point's distance to the centroid of its given
  /// label (a label out of range: NaN).
  std::vector<double> labelled;
};

/// The row of problem b's point i in a strided batch, or with offsets (offsets.size() == batch+1).
struct KmeansLayout {
  int64_t batch = 1;
  int64_t n = 0;  ///< points per problem (strided), or the bound with offsets
  int64_t d = 0;
  int64_t ld = 0;
  int64_t batch_stride = 0;
  std::vector<int64_t> offsets;  ///< empty: strided batch

  int64_t length(int64_t b) const;
  /// Element index of the first value of problem b's point i.
  int64_t at(int64_t b, int64_t i) const;
};

/// The k rows Floyd's algorithm draws from len for problem b (kRandom), in the order drawn.
std::vector<int64_t> kmeans_random_rows(uint64_t seed, int64_t b, int64_t len, int64_t k);

/// Fits as kmeans does. `given` ([batch, k, d]) is read with KmeansInit::kGiven; `means`
/// ([batch, d], or empty) are KmeansParams::means (params.means itself, a device pointer, is not
/// read).
KmeansReference kmeans(const HostArray& points, const KmeansLayout& layout,
                       const KmeansParams& params, const std::vector<double>& given = {},
                       const std::vector<double>& means = {});

/// The nearest centroid of each point, as kmeans_assign does (centroids [batch, k, d]; means
/// [batch, d] or empty). Fills labels, distances and margins of the result, and with `labels`
/// ([batch, n], e.g. the labels under test) each point's distance to its labelled centroid.
KmeansReference kmeans_assign(const HostArray& points, const KmeansLayout& layout,
                              const std::vector<double>& centroids, int64_t k,
                              const std::vector<double>& means, KmeansMetric metric,
                              const std::vector<int32_t>* labels = nullptr);

}  // namespace cudaops::ref
