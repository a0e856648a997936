// Descriptor of kmeans. Sizes: batch, n (points per problem), d, k (clusters), n_iters, and the
// options as 0/1 sizes: cosine (spherical k-means; 0: L2), center (subtract each problem's mean)
// and precision (float32's products: 0 exact, 1 TF32). The points are a Gaussian mixture of k / 2
// centres per problem, drawn on the host.
//
// --check runs the call and judges the state it returns against the double-precision reference:
// every label is the nearest returned centroid (but where two are closer than the products'
// precision), the sizes count the labels, the objective is the sum of the labels' distances.
#include <algorithm>
#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "cudaops/kmeans.h"
#include "harness/device_buffer.h"
#include "harness/registry.h"
#include "reference/kmeans.h"

namespace cudaops::harness {
namespace {

/// The case's points (data not set: a size query needs none), rows padded to 16 bytes.
KmeansPoints points_of(const CaseConfig& config) {
  KmeansPoints points;
  points.dtype = config.dtype;
  points.batch = dim_value(config.dims, "batch");
  points.n = dim_value(config.dims, "n");
  points.d = dim_value(config.dims, "d");
  const int64_t per16 = 16 / std::max<int64_t>(dtype_size(config.dtype), 1);
  // Rounded up only where that cannot wrap; the library refuses such sizes anyway.
  points.ld = points.d > 0 && points.d < (int64_t{1} << 40) ? (points.d + per16 - 1) / per16 * per16
                                                            : points.d;
  return points;
}

KmeansParams params_of(const CaseConfig& config) {
  KmeansParams params;
  params.n_clusters = dim_value(config.dims, "k");
  params.n_iters = static_cast<int>(dim_value(config.dims, "n_iters", 10));
  params.metric =
      dim_value(config.dims, "metric", 0) != 0 ? KmeansMetric::kCosine : KmeansMetric::kL2;
  params.center = dim_value(config.dims, "center", 0) != 0;
  params.precision = dim_value(config.dims, "precision", 0) != 0 ? KmeansPrecision::kTf32
                                                                 : KmeansPrecision::kExact;
  return params;
}

class KmeansCase : public OpCase {
 public:
  explicit KmeansCase(const CaseConfig& config) : config_(config) {}

  Status prepare() {
    points_ = points_of(config_);
    params_ = params_of(config_);
    const int64_t batch = points_.batch, n = points_.n, d = points_.d;
    if (batch < 0 || n < 0 || d < 1) {
      return Status(StatusCode::kInvalidArgument, "kmeans: batch, n must be >= 0 and d >= 1");
    }
    layout_.batch = batch;
    layout_.n = n;
    layout_.d = d;
    layout_.ld = points_.ld;
    layout_.batch_stride = n * layout_.ld;
    size_t bytes = 0;
    Status status = kmeans_workspace_size(points_, params_, &bytes);
    if (!status.ok()) return status;
    int64_t elements = 0;
    for (const auto& [what, a, b, c] : {std::tuple<const char*, int64_t, int64_t, int64_t>{
                                            "batch x n x ld", batch, n, layout_.ld},
                                        {"batch x k x d", batch, params_.n_clusters, d}}) {
      if (Status s = checked_elements("kmeans", what, {a, b, c}, &elements); !s.ok()) return s;
    }
    // Distinct problems up to 2^24 values; a larger batch repeats them (the timing does not
    // depend on which points they are).
    const int64_t per_problem = n * layout_.ld;
    unique_ = std::max<int64_t>(
        1, std::min<int64_t>(batch, (int64_t{1} << 24) / std::max<int64_t>(per_problem, 1)));
    host_x_ = ref::HostArray(config_.dtype, unique_ * per_problem);
    fill_mixture(unique_);
    status = x_.allocate(config_.dtype, std::max<int64_t>(batch * per_problem, 1));
    for (int64_t b = 0; status.ok() && b < batch; b += unique_) {
      const int64_t count = std::min(unique_, batch - b) * per_problem * dtype_size(config_.dtype);
      if (cudaMemcpy(static_cast<char*>(x_.data()) + b * per_problem * dtype_size(config_.dtype),
                     host_x_.data(), static_cast<size_t>(count),
                     cudaMemcpyHostToDevice) != cudaSuccess) {
        status = Status(StatusCode::kCudaError, "kmeans: uploading the points failed");
      }
    }
    if (status.ok()) status = centroids_.allocate(DType::kFloat32, batch * params_.n_clusters * d);
    if (status.ok()) status = labels_.allocate(std::max<int64_t>(batch * n, 1) * 4);
    if (status.ok()) status = sizes_.allocate(std::max<int64_t>(batch * params_.n_clusters, 1) * 4);
    if (status.ok()) status = objective_.allocate(std::max<int64_t>(batch, 1) * 4);
    if (status.ok()) status = means_.allocate(std::max<int64_t>(batch * d, 1) * 4);
    if (status.ok() && bytes > 0) status = workspace_.allocate(static_cast<int64_t>(bytes));
    points_.data = x_.data();
    return status;
  }

  /// Each iteration reads the points twice (assignment, update); the first and last passes once
  /// more each.
  int64_t bytes_moved() const override { return host_x_.size_bytes() * (2 * params_.n_iters + 3); }

  double flops() const override {
    return 2.0 * static_cast<double>(layout_.batch) * static_cast<double>(layout_.n) *
           static_cast<double>(params_.n_clusters) * static_cast<double>(layout_.d) *
           (params_.n_iters + 1);
  }

  Status run(cudaStream_t stream) override {
    KmeansResult result;
    result.centroids = centroids_.data();
    result.labels = labels_.as<int32_t>();
    result.sizes = sizes_.as<int32_t>();
    result.objective = objective_.as<float>();
    result.means = means_.as<float>();
    return kmeans(points_, params_, result, workspace_.get(),
                  static_cast<size_t>(workspace_.size_bytes()), stream);
  }

  Status check(cudaStream_t stream, ref::CompareResult* result) override {
    Status status = centroids_.poison(stream);
    if (status.ok()) status = run(stream);
    if (status.ok() && cudaStreamSynchronize(stream) != cudaSuccess) {
      return Status(StatusCode::kCudaError, "kmeans: the run failed");
    }
    ref::HostArray centroids;
    if (status.ok()) status = centroids_.download(&centroids, stream);
    if (!status.ok()) return status;
    const int64_t batch = layout_.batch, n = layout_.n, d = layout_.d, k = params_.n_clusters;
    std::vector<int32_t> labels(static_cast<size_t>(batch * n)),
        sizes(static_cast<size_t>(batch * k));
    std::vector<float> objective(static_cast<size_t>(batch)), means(static_cast<size_t>(batch * d));
    // The means are written only when the points are centred.
    if (cudaMemcpy(labels.data(), labels_.get(), labels.size() * 4, cudaMemcpyDeviceToHost) !=
            cudaSuccess ||
        cudaMemcpy(sizes.data(), sizes_.get(), sizes.size() * 4, cudaMemcpyDeviceToHost) !=
            cudaSuccess ||
        cudaMemcpy(objective.data(), objective_.get(), objective.size() * 4,
                   cudaMemcpyDeviceToHost) != cudaSuccess ||
        (params_.center && cudaMemcpy(means.data(), means_.get(), means.size() * 4,
                                      cudaMemcpyDeviceToHost) != cudaSuccess)) {
      return Status(StatusCode::kCudaError, "kmeans: downloading the results failed");
    }
    const std::vector<double> c = centroids.to_double();
    if (unique_ < batch) {
      return Status(StatusCode::kNotSupported,
                    "kmeans: --check takes at most 2^24 point values (a smaller batch or n)");
    }
    const ref::KmeansReference self = ref::kmeans_assign(
        host_x_, layout_, c, k,
        params_.center ? std::vector<double>(means.begin(), means.end()) : std::vector<double>{},
        params_.metric, &labels);
    // Per point, 1 where its label is right (nearest, or within the precision of the products of
    // the nearest), checked against 1; the objective of each problem against the sum of its
    // points' distances to their labels' centroids (labels within that precision of the nearest
    // add more than the nearest's distances do, which matters where the distances are tiny).
    // The products' precision: 16-bit and TF32 operands' rounding; split float32 (3xTF32) ones
    // carry about 21 bits.
    const bool exact32 =
        config_.dtype == DType::kFloat32 && params_.precision == KmeansPrecision::kExact;
    const double eps = config_.dtype == DType::kBFloat16 ? 0x1p-8 : exact32 ? 0x1p-19 : 0x1p-11;
    ref::HostArray got(DType::kFloat32, batch * (n + k + 1));
    std::vector<double> want(static_cast<size_t>(got.size()));
    int64_t at = 0;
    for (int64_t b = 0; b < batch; ++b) {
      double c2max = 0, objective_sum = 0;
      for (int64_t j = 0; j < k; ++j) {
        double s = 0;
        for (int64_t e = 0; e < d; ++e)
          s += c[(b * k + j) * d + e] * c[(b * k + j) * d + e];
        c2max = std::max(c2max, s);
      }
      std::vector<int32_t> counts(static_cast<size_t>(k), 0);
      for (int64_t i = 0; i < n; ++i) {
        const int64_t p = b * n + i;
        const int32_t label = labels[p];
        const bool in_range = label >= 0 && label < k;
        if (in_range) ++counts[label];
        const double threshold =
            params_.metric == KmeansMetric::kCosine ? 32 * eps : 32 * eps * 4 * c2max;
        const bool right = in_range && (label == self.labels[p] || self.margins[p] <= threshold);
        got.set(at, right ? 1.0 : 0.0);
        want[at++] = 1.0;
        objective_sum += self.labelled[p];
      }
      for (int64_t j = 0; j < k; ++j) {
        got.set(at, sizes[b * k + j]);
        want[at++] = counts[j];
      }
      got.set(at, objective[b]);
      want[at++] = objective_sum;
    }
    *result = ref::compare(got, want, ref::Tolerance{1e-3, 1.0});
    return Status();
  }

 private:
  void fill_mixture(int64_t problems) {
    std::mt19937_64 rng(config_.seed * 7919);
    std::normal_distribution<double> normal(0.0, 1.0);
    const int64_t d = layout_.d;
    const int centers = static_cast<int>(std::max<int64_t>(1, params_.n_clusters / 2));
    const double unit = 1.0 / std::sqrt(static_cast<double>(d));
    std::vector<double> c(static_cast<size_t>(centers * d));
    for (int64_t b = 0; b < problems; ++b) {
      for (double& v : c)
        v = normal(rng) * unit + 0.3;
      for (int64_t i = 0; i < layout_.n; ++i) {
        const auto which = static_cast<int64_t>(rng() % static_cast<uint64_t>(centers));
        for (int64_t e = 0; e < layout_.ld; ++e) {
          host_x_.set(layout_.at(b, i) + e,
                      e < d ? c[which * d + e] + 0.15 * unit * normal(rng) : 0.0);
        }
      }
    }
  }

  CaseConfig config_;
  KmeansParams params_;
  KmeansPoints points_;
  ref::KmeansLayout layout_;
  int64_t unique_ = 1;  // distinct problems in host_x_; problem b is problem b % unique_
  ref::HostArray host_x_;
  DeviceArray x_, centroids_;
  DeviceBuffer labels_, sizes_, objective_, means_, workspace_;
};

OpDescriptor kmeans_descriptor() {
  OpDescriptor op;
  op.name = "kmeans";
  op.summary = "batched k-means on tensor cores: many independent problems in one call";
  op.dtypes = {DType::kFloat16, DType::kBFloat16, DType::kFloat32};
  op.dims = {{"batch", "independent problems", 8},
             {"n", "points per problem", 32768},
             {"d", "dimensions (1 to 512; float32 256)", 128},
             {"k", "clusters per problem (1 to n)", 1024},
             {"n_iters", "iterations of assignment and update", 10},
             {"metric", "l2, or cosine (spherical k-means)", 0, {{"l2", 0}, {"cosine", 1}}},
             {"center", "subtract each problem's mean first", 0, {}, true},
             {"precision",
              "float32 products: exact (three TF32 products each) or tf32 (one)",
              0,
              {{"exact", 0}, {"tf32", 1}}}};
  auto shape = [](int64_t batch, int64_t n, int64_t d, int64_t k, int64_t cosine,
                  int64_t tf32 = 0) {
    return Dims{{"batch", batch}, {"n", n},           {"d", d},      {"k", k},
                {"n_iters", 10},  {"metric", cosine}, {"center", 0}, {"precision", tf32}};
  };
  // The TF32 row beside the exact one measures what float32's exact products cost (16-bit rows
  // ignore it).
  op.bench_shapes = {shape(512, 8192, 128, 512, 1), shape(32, 131072, 128, 1024, 0),
                     shape(32, 131072, 128, 1024, 0, 1), shape(8, 32768, 128, 1024, 0),
                     shape(32, 1024, 128, 64, 1)};
  op.headline_shapes = op.bench_shapes;
  op.validate = [](const CaseConfig& config) {
    size_t bytes = 0;
    return kmeans_workspace_size(points_of(config), params_of(config), &bytes);
  };
  op.make_case = [](const CaseConfig& config, std::unique_ptr<OpCase>* out) {
    auto c = std::make_unique<KmeansCase>(config);
    Status status = c->prepare();
    if (status.ok()) *out = std::move(c);
    return status;
  };
  return op;
}

[[maybe_unused]] const bool kRegistered = register_op(kmeans_descriptor());

}  // namespace
}  // namespace cudaops::harness
