#include "reference/kmeans.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <unordered_set>

#include "core/random.h"

namespace cudaops::ref {

int64_t KmeansLayout::length(int64_t b) const {
  if (offsets.empty()) return n;
  return std::min(offsets[b + 1] - offsets[b], n);
}

int64_t KmeansLayout::at(int64_t b, int64_t i) const {
  if (offsets.empty()) return b * batch_stride + i * ld;
  return (offsets[b] + i) * ld;
}

std::vector<int64_t> kmeans_random_rows(uint64_t seed, int64_t b, int64_t len, int64_t k) {
  // Floyd: for j = len - k .. len - 1, draw t in [0, j]; take t unless taken, else j.
  std::vector<int64_t> rows;
  std::unordered_set<int64_t> taken;
  const int64_t count = std::min(k, len);
  for (int64_t i = 0; i < count; ++i) {
    const int64_t j = len - count + i;
    const int64_t t = detail::random_draw(seed, b, i, j);
    const int64_t row = taken.count(t) ? j : t;
    taken.insert(row);
    rows.push_back(row);
  }
  return rows;
}

namespace {

struct Problem {
  std::vector<double> z;      // [len, d] working points
  std::vector<double> norm2;  // ||z_i||^2
  int64_t len = 0;
};

// The working points of problem b: x, minus the mean with center, unit length for cosine.
Problem working_points(const HostArray& points, const KmeansLayout& layout, int64_t b,
                       const std::vector<double>& mean, KmeansMetric metric) {
  Problem p;
  const int64_t d = layout.d;
  p.len = layout.length(b);
  p.z.assign(static_cast<size_t>(p.len * d), 0.0);
  p.norm2.assign(static_cast<size_t>(p.len), 0.0);
  for (int64_t i = 0; i < p.len; ++i) {
    double s = 0.0;
    for (int64_t c = 0; c < d; ++c) {
      const double v = points.get(layout.at(b, i) + c) - (mean.empty() ? 0.0 : mean[c]);
      p.z[i * d + c] = v;
      s += v * v;
    }
    if (metric == KmeansMetric::kCosine) {
      const double scale = s > 0.0 ? 1.0 / std::sqrt(s) : 0.0;
      for (int64_t c = 0; c < d; ++c)
        p.z[i * d + c] *= scale;
      s = s > 0.0 ? 1.0 : 0.0;
    }
    p.norm2[i] = s;
  }
  return p;
}

void normalize(double* v, int64_t d) {
  double s = 0.0;
  for (int64_t c = 0; c < d; ++c)
    s += v[c] * v[c];
  if (s <= 0.0) return;
  const double scale = 1.0 / std::sqrt(s);
  for (int64_t c = 0; c < d; ++c)
    v[c] *= scale;
}

double distance(const double* z, const double* c, int64_t d, KmeansMetric metric) {
  double s = 0.0;
  if (metric == KmeansMetric::kCosine) {
    for (int64_t e = 0; e < d; ++e)
      s += z[e] * c[e];
    return 1.0 - s;
  }
  for (int64_t e = 0; e < d; ++e) {
    const double t = z[e] - c[e];
    s += t * t;
  }
  return s;
}

// Labels, distances and margins of problem p against k centroids.
void assign(const Problem& p, const double* centroids, int64_t k, int64_t d, KmeansMetric metric,
            int32_t* labels, double* distances, double* margins, int32_t* seconds = nullptr) {
  for (int64_t i = 0; i < p.len; ++i) {
    double best = std::numeric_limits<double>::infinity();
    double second = best;
    int32_t label = 0, second_label = 0;
    for (int64_t j = 0; j < k; ++j) {
      const double dist = distance(&p.z[i * d], centroids + j * d, d, metric);
      if (dist < best) {
        second = best;
        second_label = label;
        best = dist;
        label = static_cast<int32_t>(j);
      } else if (dist < second) {
        second = dist;
        second_label = static_cast<int32_t>(j);
      }
    }
    labels[i] = label;
    distances[i] = best;
    if (margins != nullptr) margins[i] = second - best;
    if (seconds != nullptr) seconds[i] = second_label;
  }
}

}  // namespace

KmeansReference kmeans(const HostArray& points, const KmeansLayout& layout,
                       const KmeansParams& params, const std::vector<double>& given,
                       const std::vector<double>& means) {
  const int64_t batch = layout.batch, n = layout.n, d = layout.d, k = params.n_clusters;
  KmeansReference r;
  r.centroids.assign(static_cast<size_t>(batch * k * d), 0.0);
  r.labels.assign(static_cast<size_t>(batch * n), -1);
  r.sizes.assign(static_cast<size_t>(batch * k), 0);
  r.objective.assign(static_cast<size_t>(batch), 0.0);
  r.means.assign(static_cast<size_t>(batch * d), 0.0);
  r.margins.assign(static_cast<size_t>(batch * n), 0.0);
  r.distances.assign(static_cast<size_t>(batch * n), 0.0);
  r.second.assign(static_cast<size_t>(batch * n), 0);
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t len = layout.length(b);
    std::vector<double> mean;
    if (!means.empty()) {
      mean.assign(means.begin() + b * d, means.begin() + (b + 1) * d);
      std::copy(mean.begin(), mean.end(), r.means.begin() + b * d);
    } else if (params.center && len > 0) {
      mean.assign(static_cast<size_t>(d), 0.0);
      for (int64_t i = 0; i < len; ++i) {
        for (int64_t c = 0; c < d; ++c)
          mean[c] += points.get(layout.at(b, i) + c);
      }
      for (int64_t c = 0; c < d; ++c) {
        mean[c] /= static_cast<double>(len);
        r.means[b * d + c] = mean[c];
      }
    }
    const Problem p = working_points(points, layout, b, mean, params.metric);
    double* cent = &r.centroids[b * k * d];
    if (params.init == KmeansInit::kGiven) {
      std::copy(given.begin() + b * k * d, given.begin() + (b + 1) * k * d, cent);
      if (params.metric == KmeansMetric::kCosine) {
        for (int64_t j = 0; j < k; ++j)
          normalize(cent + j * d, d);
      }
    } else if (params.init == KmeansInit::kStrided) {
      for (int64_t j = 0; j < k && len > 0; ++j) {
        const int64_t row = j * len / k;
        std::copy(&p.z[row * d], &p.z[row * d] + d, cent + j * d);
      }
    } else {
      const std::vector<int64_t> rows = kmeans_random_rows(params.seed, b, len, k);
      for (size_t j = 0; j < rows.size(); ++j)
        std::copy(&p.z[rows[j] * d], &p.z[rows[j] * d] + d, cent + j * d);
    }
    std::vector<int32_t> labels(static_cast<size_t>(len));
    std::vector<double> dist(static_cast<size_t>(len));
    for (int iter = 0; iter < params.n_iters; ++iter) {
      assign(p, cent, k, d, params.metric, labels.data(), dist.data(), nullptr);
      std::vector<double> sums(static_cast<size_t>(k * d), 0.0);
      std::vector<int64_t> counts(static_cast<size_t>(k), 0);
      for (int64_t i = 0; i < len; ++i) {
        ++counts[labels[i]];
        for (int64_t c = 0; c < d; ++c)
          sums[labels[i] * d + c] += p.z[i * d + c];
      }
      std::vector<int64_t> empty;
      for (int64_t j = 0; j < k; ++j) {
        if (counts[j] == 0) {
          empty.push_back(j);
          continue;
        }
        if (params.metric == KmeansMetric::kCosine) {
          double s = 0.0;
          for (int64_t c = 0; c < d; ++c)
            s += sums[j * d + c] * sums[j * d + c];
          if (s <= 0.0) continue;  // a zero sum keeps the centroid
          for (int64_t c = 0; c < d; ++c)
            cent[j * d + c] = sums[j * d + c] / std::sqrt(s);
        } else {
          for (int64_t c = 0; c < d; ++c)
            cent[j * d + c] = sums[j * d + c] / static_cast<double>(counts[j]);
        }
      }
      if (params.empty == KmeansEmpty::kFarthest && !empty.empty()) {
        std::vector<int64_t> order(static_cast<size_t>(len));
        std::iota(order.begin(), order.end(), 0);
        std::stable_sort(order.begin(), order.end(),
                         [&](int64_t a, int64_t b2) { return dist[a] > dist[b2]; });
        const size_t reseeds = std::min<size_t>({empty.size(), 32, order.size()});
        for (size_t e = 0; e < reseeds; ++e) {
          std::copy(&p.z[order[e] * d], &p.z[order[e] * d] + d, cent + empty[e] * d);
        }
      }
    }
    std::vector<double> margins(static_cast<size_t>(len));
    std::vector<int32_t> seconds(static_cast<size_t>(len));
    assign(p, cent, k, d, params.metric, labels.data(), dist.data(), margins.data(),
           seconds.data());
    for (int64_t i = 0; i < len; ++i) {
      r.labels[b * n + i] = labels[i];
      r.distances[b * n + i] = dist[i];
      r.margins[b * n + i] = margins[i];
      r.second[b * n + i] = seconds[i];
      ++r.sizes[b * k + labels[i]];
      r.objective[b] += dist[i];
    }
  }
  return r;
}

KmeansReference kmeans_assign(const HostArray& points, const KmeansLayout& layout,
                              const std::vector<double>& centroids, int64_t k,
                              const std::vector<double>& means, KmeansMetric metric,
                              const std::vector<int32_t>* labels) {
  const int64_t batch = layout.batch, n = layout.n, d = layout.d;
  KmeansReference r;
  if (labels != nullptr) r.labelled.assign(static_cast<size_t>(batch * n), 0.0);
  r.labels.assign(static_cast<size_t>(batch * n), -1);
  r.margins.assign(static_cast<size_t>(batch * n), 0.0);
  r.distances.assign(static_cast<size_t>(batch * n), 0.0);
  r.second.assign(static_cast<size_t>(batch * n), 0);
  for (int64_t b = 0; b < batch; ++b) {
    std::vector<double> mean;
    if (!means.empty()) mean.assign(means.begin() + b * d, means.begin() + (b + 1) * d);
    const Problem p = working_points(points, layout, b, mean, metric);
    assign(p, &centroids[b * k * d], k, d, metric, &r.labels[b * n], &r.distances[b * n],
           &r.margins[b * n], &r.second[b * n]);
    for (int64_t i = 0; labels != nullptr && i < p.len; ++i) {
      const int32_t label = (*labels)[static_cast<size_t>(b * n + i)];
      r.labelled[b * n + i] =
          label >= 0 && label < k
              ? distance(&p.z[i * d], &centroids[(b * k + label) * d], d, metric)
              : std::numeric_limits<double>::quiet_NaN();
    }
  }
  return r;
}

}  // namespace cudaops::ref
