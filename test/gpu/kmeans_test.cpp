// kmeans and kmeans_assign on the device against the double-precision host reference: every dtype
// and metric, centred or not, each initialisation and empty-cluster rule, strided batches and
// problems of different lengths (offsets), odd sizes; then repeatability, a non-default stream,
// graph capture and arguments the device must refuse.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <ostream>
#include <random>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "cudaops/kmeans.h"
#include "harness/cuda_util.h"
#include "harness/device_buffer.h"
#include "reference/host_array.h"
#include "reference/kmeans.h"
#include "support/device_caps.h"

namespace cudaops {
namespace {

using harness::DeviceArray;
using harness::DeviceBuffer;
using ref::HostArray;

constexpr DType kDtypes[] = {DType::kFloat32, DType::kFloat16, DType::kBFloat16};

using testing::HasTensorCores;

/// Points drawn around `centers` centres per problem (spread 0.15 about centres of norm ~1), so
/// that most points have a clear nearest centroid; `ld` >= d, the padding filled too.
HostArray MixturePoints(DType dtype, const ref::KmeansLayout& layout, int64_t rows, int centers,
                        uint64_t seed) {
  HostArray x(dtype, rows * layout.ld);
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  for (int64_t b = 0; b < layout.batch; ++b) {
    std::vector<double> c(static_cast<size_t>(centers * layout.d));
    for (double& v : c)
      v = normal(rng) / std::sqrt(static_cast<double>(layout.d)) + 0.3;
    for (int64_t i = 0; i < layout.length(b); ++i) {
      const int which = static_cast<int>(rng() % static_cast<uint64_t>(centers));
      for (int64_t e = 0; e < layout.ld; ++e) {
        const double v = e < layout.d
                             ? c[which * layout.d + e] +
                                   0.15 * normal(rng) / std::sqrt(static_cast<double>(layout.d))
                             : 1e6;  // padding past d: must never be read
        x.set(layout.at(b, i) + e, v);
      }
    }
  }
  return x;
}

struct Case {
  DType dtype = DType::kFloat16;
  KmeansMetric metric = KmeansMetric::kL2;
  bool center = false;
  KmeansInit init = KmeansInit::kStrided;
  KmeansEmpty empty = KmeansEmpty::kKeep;
  int64_t batch = 1, n = 0, d = 0, k = 0;
  int iters = 3;
  int64_t ld_pad = 0;            // ld = d rounded to 16 bytes + ld_pad elements
  std::vector<int64_t> lengths;  // with offsets: each problem's rows (n is their bound)
  DType centroid_dtype = DType::kFloat32;
  std::vector<double> means;    // KmeansParams::means ([batch, d], float32 values), or empty
  bool centroids_only = false;  // labels, sizes and objective not asked for
  KmeansPrecision precision = KmeansPrecision::kExact;
};

/// A case of batch problems of n points of d dimensions of dtype into k clusters (the other
/// fields their defaults).
Case Shaped(DType dtype, int64_t batch, int64_t n, int64_t d, int64_t k) {
  Case c;
  c.dtype = dtype;
  c.batch = batch;
  c.n = n;
  c.d = d;
  c.k = k;
  return c;
}

/// Means to give a case: problems in pairs share one (as the segments of a head do), each value
/// a float32 near the mixture's centres.
std::vector<double> GivenMeans(int64_t batch, int64_t d) {
  std::mt19937_64 rng(5);
  std::normal_distribution<double> normal(0.2, 0.4);
  std::vector<double> means(static_cast<size_t>(batch * d));
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t e = 0; e < d; ++e) {
      means[b * d + e] = b % 2 == 1 ? means[(b - 1) * d + e]
                                    : static_cast<double>(static_cast<float>(normal(rng)));
    }
  }
  return means;
}

std::ostream& operator<<(std::ostream& os, const Case& c) {
  os << dtype_name(c.dtype) << (c.metric == KmeansMetric::kCosine ? " cosine" : " l2")
     << (c.center ? " center" : "") << " init=" << static_cast<int>(c.init)
     << " empty=" << static_cast<int>(c.empty) << " batch=" << c.batch << " n=" << c.n
     << " d=" << c.d << " k=" << c.k << " iters=" << c.iters << " ld_pad=" << c.ld_pad
     << " centroids=" << dtype_name(c.centroid_dtype) << (c.means.empty() ? "" : " given means")
     << (c.precision == KmeansPrecision::kTf32 ? " tf32" : "");
  if (!c.lengths.empty()) {
    os << " lengths=";
    for (int64_t l : c.lengths)
      os << l << ",";
  }
  return os;
}

ref::KmeansLayout LayoutOf(const Case& c) {
  ref::KmeansLayout l;
  l.batch = c.batch;
  l.n = c.n;
  l.d = c.d;
  const int64_t per16 = 16 / dtype_size(c.dtype);
  l.ld = (c.d + per16 - 1) / per16 * per16 + c.ld_pad * per16;
  l.batch_stride = c.n * l.ld;
  if (!c.lengths.empty()) {
    l.offsets.push_back(0);
    for (int64_t len : c.lengths)
      l.offsets.push_back(l.offsets.back() + len);
  }
  return l;
}

int64_t RowsOf(const ref::KmeansLayout& l) {
  return l.offsets.empty() ? l.batch * l.n : l.offsets.back();
}

struct Fit {
  std::vector<double> centroids;
  std::vector<int32_t> labels, sizes;
  std::vector<float> objective, means;
};

template <typename T>
std::vector<T> Download(const void* d_ptr, int64_t count, cudaStream_t stream) {
  std::vector<T> host(static_cast<size_t>(count));
  EXPECT_EQ(
      cudaMemcpyAsync(host.data(), d_ptr, host.size() * sizeof(T), cudaMemcpyDeviceToHost, stream),
      cudaSuccess);
  EXPECT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  return host;
}

/// Runs kmeans on `x` laid out as `layout` (given: initial centroids, float64), on `stream`.
::testing::AssertionResult RunFit(const Case& c, const ref::KmeansLayout& layout,
                                  const HostArray& x, const std::vector<double>& given,
                                  cudaStream_t stream, Fit* out, bool capture = false) {
  DeviceArray points, centroids;
  DeviceBuffer offsets, labels, sizes, objective, means, given_means, workspace;
  const int64_t rows = RowsOf(layout);
  if (!points.allocate(c.dtype, std::max<int64_t>(x.size(), 1)).ok() ||
      !points.upload(x, stream).ok()) {
    return ::testing::AssertionFailure() << "upload";
  }
  KmeansPoints p;
  p.data = points.data();
  p.dtype = c.dtype;
  p.batch = c.batch;
  p.n = c.n;
  p.d = c.d;
  p.ld = layout.ld;
  if (!layout.offsets.empty()) {
    if (!offsets.allocate(static_cast<int64_t>(layout.offsets.size() * 8)).ok()) {
      return ::testing::AssertionFailure() << "offsets";
    }
    cudaMemcpy(offsets.get(), layout.offsets.data(), layout.offsets.size() * 8,
               cudaMemcpyHostToDevice);
    p.offsets = offsets.as<int64_t>();
  }
  KmeansParams params;
  params.n_clusters = c.k;
  params.n_iters = c.iters;
  params.metric = c.metric;
  params.center = c.center;
  params.init = c.init;
  params.seed = 1234;
  params.empty = c.empty;
  params.precision = c.precision;
  if (!c.means.empty()) {
    const std::vector<float> m(c.means.begin(), c.means.end());
    if (!given_means.allocate(static_cast<int64_t>(m.size() * 4)).ok() ||
        cudaMemcpy(given_means.get(), m.data(), m.size() * 4, cudaMemcpyHostToDevice) !=
            cudaSuccess) {
      return ::testing::AssertionFailure() << "given means";
    }
    params.means = given_means.as<float>();
  }
  const int64_t kd = c.batch * c.k * c.d;
  if (!centroids.allocate(c.centroid_dtype, kd).ok()) return ::testing::AssertionFailure();
  if (c.init == KmeansInit::kGiven) {
    HostArray g(c.centroid_dtype, kd);
    for (int64_t i = 0; i < kd; ++i)
      g.set(i, given[i]);
    if (!centroids.upload(g, stream).ok()) return ::testing::AssertionFailure();
  } else if (!centroids.poison(stream).ok()) {
    return ::testing::AssertionFailure();
  }
  if (!labels.allocate(std::max<int64_t>(rows, 1) * 4).ok() ||
      !sizes.allocate(c.batch * c.k * 4).ok() || !objective.allocate(c.batch * 4).ok() ||
      !means.allocate(c.batch * c.d * 4).ok()) {
    return ::testing::AssertionFailure() << "allocation";
  }
  cudaMemsetAsync(labels.get(), 0xff, labels.size_bytes(), stream);
  cudaMemsetAsync(sizes.get(), 0xff, sizes.size_bytes(), stream);
  cudaMemsetAsync(objective.get(), 0xff, objective.size_bytes(), stream);
  cudaMemsetAsync(means.get(), 0xff, means.size_bytes(), stream);
  KmeansResult result;
  result.centroids = centroids.data();
  result.centroid_dtype = c.centroid_dtype;
  if (!c.centroids_only) {
    result.labels = labels.as<int32_t>();
    result.sizes = sizes.as<int32_t>();
    result.objective = objective.as<float>();
  }
  result.means = c.means.empty() ? means.as<float>() : nullptr;  // not written with given means
  size_t bytes = 0;
  if (Status s = kmeans_workspace_size(p, params, &bytes); !s.ok()) {
    return ::testing::AssertionFailure() << s.to_string();
  }
  if (bytes > 0 && !workspace.allocate(static_cast<int64_t>(bytes)).ok()) {
    return ::testing::AssertionFailure() << "workspace";
  }
  if (capture) {
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    if (cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal) != cudaSuccess) {
      return ::testing::AssertionFailure() << "begin capture";
    }
    const Status s = kmeans(p, params, result, workspace.get(), bytes, stream);
    if (cudaStreamEndCapture(stream, &graph) != cudaSuccess || !s.ok()) {
      return ::testing::AssertionFailure() << "capture: " << s.to_string();
    }
    if (cudaGraphInstantiate(&exec, graph, 0) != cudaSuccess ||
        cudaGraphLaunch(exec, stream) != cudaSuccess) {
      return ::testing::AssertionFailure() << "graph launch";
    }
    cudaStreamSynchronize(stream);
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
  } else if (Status s = kmeans(p, params, result, workspace.get(), bytes, stream); !s.ok()) {
    return ::testing::AssertionFailure() << s.to_string();
  }
  if (cudaStreamSynchronize(stream) != cudaSuccess) {
    return ::testing::AssertionFailure() << cudaGetErrorString(cudaGetLastError());
  }
  HostArray cent;
  if (!centroids.download(&cent, stream).ok()) return ::testing::AssertionFailure();
  out->centroids = cent.to_double();
  out->labels = Download<int32_t>(labels.get(), rows, stream);
  out->sizes = Download<int32_t>(sizes.get(), c.batch * c.k, stream);
  out->objective = Download<float>(objective.get(), c.batch, stream);
  out->means = c.means.empty() ? Download<float>(means.get(), c.batch * c.d, stream)
                               : std::vector<float>(c.means.begin(), c.means.end());
  return ::testing::AssertionSuccess();
}

/// The relative precision of the points' products on the tensor cores: the 16-bit operands' and
/// TF32's rounding; float32's split products (3xTF32) carry about 21 bits.
double ProductEps(DType dtype, KmeansPrecision precision = KmeansPrecision::kExact) {
  if (dtype == DType::kFloat32 && precision == KmeansPrecision::kExact) return 0x1p-19;
  return dtype == DType::kBFloat16 ? 0x1p-8 : 0x1p-11;
}

double ProductEps(const Case& c) {
  return ProductEps(c.dtype, c.precision);
}

/// Whether the reference's two nearest centroids of a point are too close for the products'
/// precision (eps) to tell apart: margin below 32 eps (|z|^2 + the largest |c|^2) for L2, 32 eps
/// for cosine (unit vectors).
bool Ambiguous(double margin, double z2, double c2max, KmeansMetric metric, double eps) {
  return margin <= (metric == KmeansMetric::kCosine ? 32 * eps : 32 * eps * (z2 + c2max));
}

KmeansParams ParamsOf(const Case& c, int iters) {
  KmeansParams params;
  params.n_clusters = c.k;
  params.n_iters = iters;
  params.metric = c.metric;
  params.center = c.center;
  params.init = c.init;
  params.seed = 1234;
  params.empty = c.empty;
  params.precision = c.precision;
  return params;
}

double MaxNorm2(const std::vector<double>& centroids, int64_t b, int64_t k, int64_t d) {
  double best = 0;
  for (int64_t j = 0; j < k; ++j) {
    double s = 0;
    for (int64_t e = 0; e < d; ++e)
      s += centroids[(b * k + j) * d + e] * centroids[(b * k + j) * d + e];
    best = std::max(best, s);
  }
  return best;
}

/// |z_i|^2 of problem b's working point i (the reference's distance to the zero vector).
double Norm2(const ref::KmeansReference& at_zero, int64_t index) {
  return at_zero.distances[index];
}

/// Three runs of the case against the reference:
///   1. no iterations: the labels of the initial centroids, but where the reference's two nearest
///      are closer than the products' precision;
///   2. one iteration: each centroid equals the reference's, but for clusters that such a point
///      may have joined or left;
///   3. the case's iterations: a consistent result (trajectories may part at a near tie): the
///      labels are the nearest of the returned centroids, the sizes count them, the objective
///      is their distances' sum and no larger than run 1's.
::testing::AssertionResult CheckFit(const Case& c) {
  const ref::KmeansLayout layout = LayoutOf(c);
  const HostArray x = MixturePoints(c.dtype, layout, std::max<int64_t>(RowsOf(layout), 1),
                                    std::max<int>(1, static_cast<int>(c.k / 2)),
                                    static_cast<uint64_t>(c.n * 7 + c.d * 3 + c.k));
  std::vector<double> given;
  if (c.init == KmeansInit::kGiven) {
    std::mt19937_64 rng(99);
    std::normal_distribution<double> normal(0.3, 0.5);
    given.resize(static_cast<size_t>(c.batch * c.k * c.d));
    HostArray rounded(c.centroid_dtype, static_cast<int64_t>(given.size()));
    for (size_t i = 0; i < given.size(); ++i) {
      rounded.set(static_cast<int64_t>(i), normal(rng) / std::sqrt(static_cast<double>(c.d)));
      given[i] = rounded.get(static_cast<int64_t>(i));
    }
  }
  const ref::KmeansReference want0 = ref::kmeans(x, layout, ParamsOf(c, 0), given, c.means);
  const ref::KmeansReference want1 = ref::kmeans(x, layout, ParamsOf(c, 1), given, c.means);
  const bool centred = c.center || !c.means.empty();
  // |z|^2 of every working point: distances to zero centroids.
  const ref::KmeansReference zero = ref::kmeans_assign(
      x, layout, std::vector<double>(static_cast<size_t>(c.batch * c.k * c.d), 0.0), c.k,
      centred ? want0.means : std::vector<double>{}, KmeansMetric::kL2);

  Case c0 = c;
  c0.iters = 0;
  Fit got0, got1, got;
  if (auto r = RunFit(c0, layout, x, given, nullptr, &got0); !r) return r;
  Case c1 = c;
  c1.iters = 1;
  if (auto r = RunFit(c1, layout, x, given, nullptr, &got1); !r) return r;
  if (auto r = RunFit(c, layout, x, given, nullptr, &got); !r) return r;

  int64_t compared = 0;
  for (int64_t b = 0; b < c.batch; ++b) {
    const int64_t len = layout.length(b);
    const int64_t base = layout.offsets.empty() ? b * c.n : layout.offsets[b];
    const double c2max = MaxNorm2(want0.centroids, b, c.k, c.d);
    // Run 1.
    std::vector<bool> dirty(static_cast<size_t>(c.k), false);
    for (int64_t i = 0; i < len; ++i) {
      const int64_t p = b * c.n + i;
      const bool ambiguous =
          Ambiguous(want0.margins[p], Norm2(zero, p), c2max, c.metric, ProductEps(c));
      if (ambiguous) {
        dirty[want0.labels[p]] = dirty[want0.second[p]] = true;
      } else if (got0.labels[base + i] != want0.labels[p]) {
        return ::testing::AssertionFailure()
               << "no iterations, problem " << b << " row " << i << ": label "
               << got0.labels[base + i] << ", reference " << want0.labels[p] << " (margin "
               << want0.margins[p] << ")";
      }
      ++compared;
    }
    if (c.center) {
      for (int64_t e = 0; e < c.d; ++e) {
        const double m = want0.means[b * c.d + e];
        if (std::abs(got0.means[b * c.d + e] - m) > 1e-5 * (1 + std::abs(m))) {
          return ::testing::AssertionFailure() << "problem " << b << " mean " << e << ": "
                                               << got0.means[b * c.d + e] << " != " << m;
        }
      }
    }
    {
      const double eps = ProductEps(c);
      const double slack =
          64 * eps * (c.metric == KmeansMetric::kCosine ? 1.0 : c2max) * static_cast<double>(len);
      if (!(std::abs(got0.objective[b] - want0.objective[b]) <=
            slack + 1e-4 * std::abs(want0.objective[b]))) {
        return ::testing::AssertionFailure()
               << "no iterations, problem " << b << ": objective " << got0.objective[b]
               << ", reference " << want0.objective[b];
      }
    }
    // Run 2 (re-seeded clusters depend on every distance: they count as dirty).
    for (int64_t j = 0; j < c.k; ++j) {
      if (dirty[j] || (c.empty == KmeansEmpty::kFarthest && want0.sizes[b * c.k + j] == 0)) {
        continue;
      }
      for (int64_t e = 0; e < c.d; ++e) {
        const double w = want1.centroids[(b * c.k + j) * c.d + e];
        const double g = got1.centroids[(b * c.k + j) * c.d + e];
        const double tol =
            (c.centroid_dtype == DType::kFloat32 ? 1e-5 : ProductEps(c)) * (1 + std::abs(w)) * 4;
        if (!(std::abs(g - w) <= tol)) {
          return ::testing::AssertionFailure()
                 << "one iteration, problem " << b << " centroid " << j << " value " << e << ": "
                 << g << ", reference " << w;
        }
      }
    }
  }
  // Run 3: the returned state against itself.
  const ref::KmeansReference self = ref::kmeans_assign(
      x, layout, got.centroids, c.k,
      centred ? std::vector<double>(got.means.begin(), got.means.end()) : std::vector<double>{},
      c.metric);
  for (int64_t b = 0; b < c.batch; ++b) {
    const int64_t len = layout.length(b);
    const int64_t base = layout.offsets.empty() ? b * c.n : layout.offsets[b];
    const double c2max = MaxNorm2(got.centroids, b, c.k, c.d);
    std::vector<int32_t> counts(static_cast<size_t>(c.k), 0);
    double objective = 0;
    for (int64_t i = 0; i < len; ++i) {
      const int64_t p = b * c.n + i;
      const int32_t label = got.labels[base + i];
      if (label < 0 || label >= c.k) {
        return ::testing::AssertionFailure()
               << "problem " << b << " row " << i << ": label " << label;
      }
      ++counts[label];
      if (label != self.labels[p] &&
          !Ambiguous(self.margins[p], Norm2(zero, p), c2max, c.metric, ProductEps(c))) {
        return ::testing::AssertionFailure()
               << "problem " << b << " row " << i << ": label " << label
               << " is not the nearest returned centroid, " << self.labels[p];
      }
      objective += self.distances[p];
    }
    for (int64_t j = 0; j < c.k; ++j) {
      if (got.sizes[b * c.k + j] != counts[j]) {
        return ::testing::AssertionFailure()
               << "problem " << b << " cluster " << j << ": size " << got.sizes[b * c.k + j]
               << ", labels count " << counts[j];
      }
    }
    const double eps = ProductEps(c);
    const double slack =
        64 * eps * (c.metric == KmeansMetric::kCosine ? 1.0 : c2max) * static_cast<double>(len);
    if (!(std::abs(got.objective[b] - objective) <= slack + 1e-4 * std::abs(objective))) {
      return ::testing::AssertionFailure() << "problem " << b << ": objective " << got.objective[b]
                                           << ", its labels' distances add up to " << objective;
    }
    if (!(got.objective[b] <= got0.objective[b] + slack)) {
      return ::testing::AssertionFailure()
             << "problem " << b << ": objective " << got.objective[b] << " after the iterations, "
             << got0.objective[b] << " before";
    }
  }
  (void)compared;
  return ::testing::AssertionSuccess();
}

class KmeansCases : public ::testing::TestWithParam<Case> {};

TEST_P(KmeansCases, MatchesReference) {
  if (!HasTensorCores()) GTEST_SKIP() << "needs compute capability 7.5";
  EXPECT_TRUE(CheckFit(GetParam()));
}

std::vector<Case> Cases() {
  std::vector<Case> cases;
  struct Shape {
    int64_t batch, n, d, k;
  };
  const Shape shapes[] = {{1, 1, 1, 1},       {3, 7, 3, 2},        {2, 199, 64, 5},
                          {5, 257, 96, 65},   {1, 1000, 128, 130}, {4, 300, 200, 17},
                          {2, 513, 256, 64},  {2, 700, 128, 300},  {1, 1300, 128, 600},
                          {3, 2048, 64, 256}, {2, 2049, 32, 20}};
  for (DType dtype : kDtypes) {
    for (const Shape& s : shapes) {
      for (KmeansMetric metric : {KmeansMetric::kL2, KmeansMetric::kCosine}) {
        Case c = Shaped(dtype, s.batch, s.n, s.d, s.k);
        c.metric = metric;
        cases.push_back(c);
        c.center = true;
        c.iters = 5;
        cases.push_back(c);
      }
    }
    // d at the largest supported, and 16-bit rows of 512.
    Case wide = Shaped(dtype, 2, 150, dtype == DType::kFloat32 ? 256 : 512, 9);
    cases.push_back(wide);
    // Initialisations, empty-cluster rules, centroid dtype, row strides, offsets.
    Case c = Shaped(dtype, 3, 333, 64, 12);
    c.init = KmeansInit::kRandom;
    cases.push_back(c);
    c.init = KmeansInit::kGiven;
    cases.push_back(c);
    c.centroid_dtype = dtype;
    cases.push_back(c);
    c.centroid_dtype = DType::kFloat32;
    c.init = KmeansInit::kStrided;
    c.ld_pad = 3;
    cases.push_back(c);
    c.ld_pad = 0;
    c.empty = KmeansEmpty::kFarthest;
    c.init = KmeansInit::kGiven;  // random centroids far from the data leave clusters empty
    cases.push_back(c);
    c.metric = KmeansMetric::kCosine;
    cases.push_back(c);
    Case var = Shaped(dtype, 5, 400, 32, 7);
    var.lengths = {400, 0, 3, 129, 250};
    var.center = true;
    cases.push_back(var);
    var.metric = KmeansMetric::kCosine;
    var.init = KmeansInit::kRandom;
    cases.push_back(var);
    // Given means: by offsets (spherical, as the IVF index's segments are) and strided.
    var.center = false;
    var.init = KmeansInit::kStrided;
    var.means = GivenMeans(var.batch, var.d);
    cases.push_back(var);
    // An extension of the IVF index: 1024 tokens of a head into 64 clusters, spherical, the
    // head's mean given.
    Case extend = Shaped(dtype, 6, 1024, 128, 64);
    extend.metric = KmeansMetric::kCosine;
    extend.means = GivenMeans(extend.batch, extend.d);
    cases.push_back(extend);
    // Clusters enough that the grouping's table holds 13 rows (warps) and not 32.
    Case many = Shaped(dtype, 2, 4100, 8, 4097);
    many.lengths = {4100, 3001};
    cases.push_back(many);
    Case strided = Shaped(dtype, 4, 257, 96, 9);
    strided.iters = 4;
    strided.means = GivenMeans(strided.batch, strided.d);
    cases.push_back(strided);
  }
  // float32 with single TF32 products: the small problems' kernel, the assignment and the sums'
  // operand, both metrics.
  for (const Case& shape :
       {Shaped(DType::kFloat32, 5, 257, 96, 65), Shaped(DType::kFloat32, 1, 1300, 128, 600),
        Shaped(DType::kFloat32, 2, 513, 256, 64), Shaped(DType::kFloat32, 3, 2048, 64, 256)}) {
    for (KmeansMetric metric : {KmeansMetric::kL2, KmeansMetric::kCosine}) {
      Case c = shape;
      c.metric = metric;
      c.precision = KmeansPrecision::kTf32;
      cases.push_back(c);
      c.center = true;
      cases.push_back(c);
    }
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(All, KmeansCases, ::testing::ValuesIn(Cases()));

// The same call twice, on a non-default stream and under graph capture: the same bits.
TEST(Kmeans, RepeatableOnAnyStreamAndInAGraph) {
  if (!HasTensorCores()) GTEST_SKIP() << "needs compute capability 7.5";
  // The second shape's iterations run in one launch (three blocks a problem) for 16-bit points.
  for (const auto& [dtype, n, k] :
       {std::tuple{DType::kFloat32, 2000, 100}, std::tuple{DType::kFloat16, 2000, 100},
        std::tuple{DType::kBFloat16, 2000, 100}, std::tuple{DType::kFloat16, 1500, 48},
        std::tuple{DType::kBFloat16, 1500, 48}}) {
    Case c = Shaped(dtype, 6, n, 128, k);
    c.metric = KmeansMetric::kCosine;
    c.center = true;
    c.iters = 4;
    const ref::KmeansLayout layout = LayoutOf(c);
    const HostArray x = MixturePoints(dtype, layout, RowsOf(layout), 40, 5);
    harness::Stream stream;
    ASSERT_TRUE(stream.create().ok());
    Fit a, b, g;
    ASSERT_TRUE(RunFit(c, layout, x, {}, nullptr, &a));
    ASSERT_TRUE(RunFit(c, layout, x, {}, stream.get(), &b));
    ASSERT_TRUE(RunFit(c, layout, x, {}, stream.get(), &g, /*capture=*/true));
    for (const Fit* other : {&b, &g}) {
      EXPECT_EQ(a.labels, other->labels) << dtype_name(dtype);
      EXPECT_EQ(a.sizes, other->sizes);
      EXPECT_EQ(std::memcmp(a.centroids.data(), other->centroids.data(),
                            a.centroids.size() * sizeof(double)),
                0);
      EXPECT_EQ(std::memcmp(a.objective.data(), other->objective.data(),
                            a.objective.size() * sizeof(float)),
                0);
    }
  }
}

// Centroids alone (no labels, sizes or objective asked for, as the IVF build's global pass
// does): the same centroids, and nothing else written.
TEST(Kmeans, CentroidsAlone) {
  if (!HasTensorCores()) GTEST_SKIP() << "needs compute capability 7.5";
  // The first shape's iterations run launch by launch, the second's in one launch.
  for (const auto& [dtype, n, k] :
       {std::tuple{DType::kFloat16, 3000, 100}, std::tuple{DType::kBFloat16, 1500, 48},
        std::tuple{DType::kFloat32, 3000, 70}}) {
    Case c = Shaped(dtype, 3, n, 64, k);
    c.metric = KmeansMetric::kCosine;
    const ref::KmeansLayout layout = LayoutOf(c);
    const HostArray x = MixturePoints(dtype, layout, RowsOf(layout), 20, 9);
    Fit all, alone;
    ASSERT_TRUE(RunFit(c, layout, x, {}, nullptr, &all));
    c.centroids_only = true;
    ASSERT_TRUE(RunFit(c, layout, x, {}, nullptr, &alone));
    EXPECT_EQ(std::memcmp(all.centroids.data(), alone.centroids.data(),
                          all.centroids.size() * sizeof(double)),
              0)
        << dtype_name(dtype);
    EXPECT_EQ(alone.labels, std::vector<int32_t>(alone.labels.size(), -1));
    EXPECT_EQ(alone.sizes, std::vector<int32_t>(alone.sizes.size(), -1));
  }
}

// float32's exact products: a fit on isotropic Gaussian points (near ties everywhere) ends within
// 0.1% of the float64 reference's objective from the same initial centroids, in both metrics,
// small problems and large; TF32 products are only asked to run.
TEST(Kmeans, Float32FitsAsFloat64Does) {
  if (!HasTensorCores()) GTEST_SKIP() << "needs compute capability 7.5";
  for (const auto& [n, d, k] : {std::tuple<int64_t, int64_t, int64_t>{1000, 64, 16},
                                std::tuple<int64_t, int64_t, int64_t>{6000, 96, 100}}) {
    for (KmeansMetric metric : {KmeansMetric::kL2, KmeansMetric::kCosine}) {
      Case c = Shaped(DType::kFloat32, 2, n, d, k);
      c.metric = metric;
      c.iters = 10;
      c.init = KmeansInit::kGiven;
      const ref::KmeansLayout layout = LayoutOf(c);
      HostArray x(DType::kFloat32, c.batch * c.n * layout.ld);
      std::mt19937_64 rng(static_cast<uint64_t>(n + d + k));
      std::normal_distribution<double> normal(0.0, 1.0);
      for (int64_t i = 0; i < x.size(); ++i)
        x.set(i, i % layout.ld < d ? normal(rng) : 0.0);
      // Initial centroids: strided points (cosine: at unit length), as float32 values.
      std::vector<double> given(static_cast<size_t>(c.batch * k * d));
      for (int64_t b = 0; b < c.batch; ++b) {
        for (int64_t j = 0; j < k; ++j) {
          double s = 0;
          for (int64_t e = 0; e < d; ++e) {
            const double v = x.get(layout.at(b, j * n / k) + e);
            given[(b * k + j) * d + e] = v;
            s += v * v;
          }
          for (int64_t e = 0; metric == KmeansMetric::kCosine && e < d; ++e) {
            double& v = given[(b * k + j) * d + e];
            v = static_cast<float>(v / std::sqrt(s));
          }
        }
      }
      const ref::KmeansReference want = ref::kmeans(x, layout, ParamsOf(c, c.iters), given);
      for (KmeansPrecision precision : {KmeansPrecision::kExact, KmeansPrecision::kTf32}) {
        c.precision = precision;
        Fit got;
        ASSERT_TRUE(RunFit(c, layout, x, given, nullptr, &got)) << c;
        for (int64_t b = 0; b < c.batch; ++b) {
          const double ratio = got.objective[b] / want.objective[b];
          if (precision == KmeansPrecision::kExact) {
            EXPECT_NEAR(ratio, 1.0, 1e-3) << c << " problem " << b;
          } else {
            EXPECT_TRUE(std::isfinite(ratio)) << c << " problem " << b;
          }
          std::printf("%s problem %lld: objective / float64's = %.6f\n",
                      ::testing::PrintToString(c).c_str(), static_cast<long long>(b), ratio);
        }
      }
    }
  }
}

// An update sums again only the clusters a row joined or left since the assignment before, and
// keeps the others' centroids as the last update computed them: the same bits as summing every
// cluster at every update (CUDAOPS_KMEANS_UPDATE=full). Mixture data, so that clusters settle
// within the iterations; with offsets, re-seeding and means too. The last three shapes take the
// small problems' kernel, which also ends a problem's fit once no point moves.
TEST(Kmeans, KeptClustersMatchAFullUpdate) {
  if (!HasTensorCores()) GTEST_SKIP() << "needs compute capability 7.5";
  struct Shape {
    DType dtype;
    KmeansMetric metric;
    bool center;
    KmeansEmpty empty;
    int64_t k;
    int64_t n;
    std::vector<int64_t> lengths;  // empty: no offsets
  };
  using E = KmeansEmpty;
  using M = KmeansMetric;
  for (const Shape& s :
       {Shape{DType::kFloat16, M::kCosine, false, E::kKeep, 100, 3000, {}},
        Shape{DType::kBFloat16, M::kL2, true, E::kFarthest, 160, 3000, {}},
        Shape{DType::kFloat16, M::kL2, false, E::kKeep, 600, 3000, {3000, 2211, 2600, 2999}},
        Shape{DType::kFloat32, M::kCosine, true, E::kKeep, 300, 3000, {}},
        Shape{DType::kFloat16, M::kCosine, true, E::kKeep, 64, 1024, {1024, 700, 1, 1023}},
        Shape{DType::kBFloat16, M::kL2, false, E::kKeep, 40, 2000, {}},
        Shape{DType::kFloat32, M::kCosine, false, E::kKeep, 20, 300, {}}}) {
    Case c = Shaped(s.dtype, 4, s.n, 96, s.k);
    c.metric = s.metric;
    c.center = s.center;
    c.empty = s.empty;
    c.iters = 8;
    c.lengths = s.lengths;
    const ref::KmeansLayout layout = LayoutOf(c);
    const HostArray x = MixturePoints(s.dtype, layout, RowsOf(layout), 30, 11);
    Fit kept, full;
    ASSERT_TRUE(RunFit(c, layout, x, {}, nullptr, &kept));
    ASSERT_EQ(setenv("CUDAOPS_KMEANS_UPDATE", "full", 1), 0);
    const ::testing::AssertionResult ran = RunFit(c, layout, x, {}, nullptr, &full);
    unsetenv("CUDAOPS_KMEANS_UPDATE");
    ASSERT_TRUE(ran);
    EXPECT_EQ(kept.labels, full.labels) << c;
    EXPECT_EQ(kept.sizes, full.sizes) << c;
    EXPECT_EQ(std::memcmp(kept.centroids.data(), full.centroids.data(),
                          kept.centroids.size() * sizeof(double)),
              0)
        << c;
    EXPECT_EQ(std::memcmp(kept.objective.data(), full.objective.data(),
                          kept.objective.size() * sizeof(float)),
              0)
        << c;
  }
}

// kmeans_assign against the reference, with and without means, centroids in either dtype.
TEST(KmeansAssign, MatchesReference) {
  if (!HasTensorCores()) GTEST_SKIP() << "needs compute capability 7.5";
  for (DType dtype : kDtypes) {
    for (KmeansMetric metric : {KmeansMetric::kL2, KmeansMetric::kCosine}) {
      // The third and fourth have more centroids than shared memory holds at once on an H100;
      // the fifth more rows than one block of the results takes. The last moves the points
      // away from every centroid (shift added to each value), so that all of a row's scores
      // have one sign (the case Hopper's integer maxima leave to float minima).
      for (const auto& [batch, n, d, k, with_means, shift] :
           {std::tuple{3, 777, 80, 70, false, 0.0}, std::tuple{3, 777, 80, 70, true, 0.0},
            std::tuple{2, 1500, 128, 1100, true, 0.0}, std::tuple{1, 1600, 40, 1500, false, 0.0},
            std::tuple{2, 9001, 48, 40, true, 0.0}, std::tuple{2, 1500, 128, 700, false, -2.0}}) {
        SCOPED_TRACE(std::string(dtype_name(dtype)) +
                     (metric == KmeansMetric::kCosine ? " cosine" : " l2") +
                     (with_means ? " means" : "") + " k " + std::to_string(k) +
                     (shift != 0 ? " shifted" : ""));
        const Case c = Shaped(dtype, batch, n, d, k);
        const ref::KmeansLayout layout = LayoutOf(c);
        HostArray x = MixturePoints(dtype, layout, RowsOf(layout), 30, 11);
        for (int64_t r = 0; shift != 0 && r < RowsOf(layout); ++r) {
          for (int64_t e = 0; e < c.d; ++e)
            x.set(r * layout.ld + e, x.get(r * layout.ld + e) + shift);
        }
        std::mt19937_64 rng(3);
        std::normal_distribution<double> normal(0.3, 0.4);
        HostArray cent(DType::kFloat32, c.batch * c.k * c.d);
        HostArray means(DType::kFloat32, c.batch * c.d);
        for (int64_t i = 0; i < cent.size(); ++i)
          cent.set(i, normal(rng) / std::sqrt(static_cast<double>(c.d)));
        for (int64_t i = 0; i < means.size(); ++i)
          means.set(i, with_means ? 0.1 * normal(rng) : 0.0);
        if (metric == KmeansMetric::kCosine) {
          for (int64_t j = 0; j < c.batch * c.k; ++j) {
            double s = 0;
            for (int64_t e = 0; e < c.d; ++e)
              s += cent.get(j * c.d + e) * cent.get(j * c.d + e);
            for (int64_t e = 0; e < c.d; ++e)
              cent.set(j * c.d + e, cent.get(j * c.d + e) / std::sqrt(s));
          }
        }
        const ref::KmeansReference want =
            ref::kmeans_assign(x, layout, cent.to_double(), c.k,
                               with_means ? means.to_double() : std::vector<double>{}, metric);
        DeviceArray dx, dc, dm;
        DeviceBuffer labels, dist, workspace;
        ASSERT_TRUE(dx.allocate(dtype, x.size()).ok());
        ASSERT_TRUE(dx.upload(x, nullptr).ok());
        ASSERT_TRUE(dc.allocate(DType::kFloat32, cent.size()).ok());
        ASSERT_TRUE(dc.upload(cent, nullptr).ok());
        ASSERT_TRUE(dm.allocate(DType::kFloat32, means.size()).ok());
        ASSERT_TRUE(dm.upload(means, nullptr).ok());
        ASSERT_TRUE(labels.allocate(c.batch * c.n * 4).ok());
        ASSERT_TRUE(dist.allocate(c.batch * c.n * 4).ok());
        KmeansPoints p;
        p.data = dx.data();
        p.dtype = dtype;
        p.batch = c.batch;
        p.n = c.n;
        p.d = c.d;
        p.ld = layout.ld;
        KmeansCentroids kc;
        kc.data = dc.data();
        kc.dtype = DType::kFloat32;
        kc.n_clusters = c.k;
        kc.means = with_means ? static_cast<const float*>(dm.data()) : nullptr;
        size_t bytes = 0;
        ASSERT_TRUE(kmeans_assign_workspace_size(p, kc, metric, &bytes).ok());
        ASSERT_TRUE(workspace.allocate(static_cast<int64_t>(bytes)).ok());
        ASSERT_TRUE(kmeans_assign(p, kc, metric, labels.as<int32_t>(), dist.as<float>(),
                                  workspace.get(), bytes, nullptr)
                        .ok());
        const auto got_labels = Download<int32_t>(labels.get(), c.batch * c.n, nullptr);
        const auto got_dist = Download<float>(dist.get(), c.batch * c.n, nullptr);
        const double eps = ProductEps(dtype);
        int64_t clear_differ = 0;
        for (int64_t i = 0; i < c.batch * c.n; ++i) {
          if (got_labels[i] != want.labels[i] && want.margins[i] > 256 * eps) ++clear_differ;
          EXPECT_NEAR(got_dist[i], want.distances[i], 256 * eps * (1 + std::abs(want.distances[i])))
              << "point " << i;
        }
        EXPECT_EQ(clear_differ, 0);
      }
    }
  }
}

}  // namespace
}  // namespace cudaops
