// The IVF index's build on the device: per-head means against the double-precision reference;
// the CSR layout (every token of a head in exactly one cluster, ascending within one, offsets and
// sizes consistent, empty slots past the clusters); ids, keys and values copied in cluster order
// bit for bit; value sums; unit centroids and their rounded copy; with the global pass each token
// in the cluster of its largest inner product among the returned centroids (but at near ties),
// without it in one of its own segment's clusters; the same bits on another stream.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "cudaops/ivf.h"
#include "harness/device_buffer.h"
#include "reference/host_array.h"
#include "reference/ivf.h"
#include "reference/kmeans.h"
#include "support/device_caps.h"

namespace cudaops {
namespace {

using harness::DeviceBuffer;
using ref::HostArray;

using testing::HasTensorCores;

struct Case {
  DType dtype = DType::kFloat16;
  int64_t heads = 1, seq = 0, dim = 0, value_dim = 0, clusters = 0, segments = 1;
  int64_t capacity = 0, max_clusters = 0;  // 0: seq, clusters
  int64_t distinct = 0;  // > 0: each head's keys repeat its first `distinct` (tied scores)
  bool global_pass = true;
  bool prune = true;
  int n_iters = 4;
};

std::ostream& operator<<(std::ostream& os, const Case& c) {
  return os << dtype_name(c.dtype) << " H=" << c.heads << " S=" << c.seq << " D=" << c.dim
            << " Dv=" << c.value_dim << " C=" << c.clusters << " segments=" << c.segments
            << " capacity=" << c.capacity << " max_clusters=" << c.max_clusters
            << (c.distinct > 0 ? " distinct=" + std::to_string(c.distinct) : std::string())
            << (c.global_pass ? " global" : "") << (c.global_pass && !c.prune ? " dense" : "");
}

/// Keys around a few directions per head plus a large common offset (as attention keys have).
HostArray Keys(const Case& c, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  HostArray x(c.dtype, c.heads * c.seq * c.dim);
  for (int64_t h = 0; h < c.heads; ++h) {
    std::vector<double> offset(static_cast<size_t>(c.dim)), dirs(static_cast<size_t>(8 * c.dim));
    for (double& v : offset)
      v = 2.0 + 0.5 * normal(rng);
    for (double& v : dirs)
      v = normal(rng);
    for (int64_t t = 0; t < c.seq; ++t) {
      const int64_t which = static_cast<int64_t>(rng() % 8);
      for (int64_t e = 0; e < c.dim; ++e) {
        const int64_t i = (h * c.seq + t) * c.dim + e;
        if (c.distinct > 0 && t >= c.distinct) {
          x.set(i, x.get((h * c.seq + t % c.distinct) * c.dim + e));
        } else {
          x.set(i, offset[e] + dirs[which * c.dim + e] + 0.3 * normal(rng));
        }
      }
    }
  }
  return x;
}

HostArray Values(const Case& c, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  HostArray v(c.dtype, std::max<int64_t>(c.heads * c.seq * c.value_dim, 1));
  for (int64_t i = 0; i < c.heads * c.seq * c.value_dim; ++i)
    v.set(i, normal(rng));
  return v;
}

template <typename T>
std::vector<T> Copy(const void* device, int64_t count) {
  std::vector<T> host(static_cast<size_t>(std::max<int64_t>(count, 0)));
  EXPECT_EQ(cudaMemcpy(host.data(), device, host.size() * sizeof(T), cudaMemcpyDeviceToHost),
            cudaSuccess);
  return host;
}

/// Tokens [from, to) of every head of keys [heads, seq, dim].
HostArray TokenRange(const HostArray& keys, int64_t heads, int64_t seq, int64_t dim, int64_t from,
                     int64_t to) {
  HostArray out(keys.dtype(), heads * (to - from) * dim);
  const int64_t row = keys.size_bytes() / keys.size() * dim;
  for (int64_t h = 0; h < heads; ++h) {
    std::memcpy(static_cast<unsigned char*>(out.data()) + h * (to - from) * row,
                static_cast<const unsigned char*>(keys.data()) + (h * seq + from) * row,
                static_cast<size_t>((to - from) * row));
  }
  return out;
}

/// `buffer` sized for index->shape and poisoned (0xff), as index->data.
::testing::AssertionResult AllocateIndex(IvfIndex* index, DeviceBuffer* buffer) {
  IvfLayout layout;
  if (!ivf_index_size(index->shape, &layout).ok() ||
      !buffer->allocate(static_cast<int64_t>(layout.bytes)).ok()) {
    return ::testing::AssertionFailure() << "sizes or allocation";
  }
  cudaMemset(buffer->get(), 0xff, layout.bytes);
  index->data = buffer->get();
  return ::testing::AssertionSuccess();
}

struct Built {
  std::vector<float> means, centroids, value_sums;
  std::vector<int64_t> offsets;
  std::vector<int32_t> sizes, ids, largest;
  std::vector<unsigned char> centroids_lp, keys, values;
};

::testing::AssertionResult BuildOn(const Case& c, const HostArray& keys, const HostArray& values,
                                   cudaStream_t stream, Built* out) {
  IvfIndex index;
  index.shape.heads = c.heads;
  index.shape.dim = c.dim;
  index.shape.value_dim = c.value_dim;
  index.shape.capacity = c.capacity > 0 ? c.capacity : c.seq;
  index.shape.max_clusters = c.max_clusters > 0 ? c.max_clusters : c.clusters;
  index.shape.dtype = c.dtype;
  IvfLayout layout;
  if (Status s = ivf_index_size(index.shape, &layout); !s.ok()) {
    return ::testing::AssertionFailure() << s.to_string();
  }
  DeviceBuffer buffer, d_keys, d_values, workspace;
  IvfInput input;
  input.seq = c.seq;
  IvfBuildParams params;
  params.n_clusters = c.clusters;
  params.n_segments = c.segments;
  params.n_iters = c.n_iters;
  params.global_pass = c.global_pass;
  params.prune = c.prune;
  size_t bytes = 0;
  if (Status s = ivf_build_workspace_size(index.shape, input, params, &bytes); !s.ok()) {
    return ::testing::AssertionFailure() << s.to_string();
  }
  if (!buffer.allocate(static_cast<int64_t>(layout.bytes)).ok() ||
      !d_keys.allocate(keys.size_bytes()).ok() || !d_values.allocate(values.size_bytes()).ok() ||
      !workspace.allocate(static_cast<int64_t>(bytes)).ok()) {
    return ::testing::AssertionFailure() << "allocation";
  }
  cudaMemcpy(d_keys.get(), keys.data(), static_cast<size_t>(keys.size_bytes()),
             cudaMemcpyHostToDevice);
  cudaMemcpy(d_values.get(), values.data(), static_cast<size_t>(values.size_bytes()),
             cudaMemcpyHostToDevice);
  cudaMemset(buffer.get(), 0xff, layout.bytes);  // poisoned: everything read back is written
  cudaMemset(workspace.get(), 0xff, bytes);
  index.data = buffer.get();
  input.keys = d_keys.get();
  input.values = c.value_dim > 0 ? d_values.get() : nullptr;
  if (Status s = ivf_build(input, params, &index, workspace.get(), bytes, stream); !s.ok()) {
    return ::testing::AssertionFailure() << s.to_string();
  }
  if (cudaStreamSynchronize(stream) != cudaSuccess) {
    return ::testing::AssertionFailure() << cudaGetErrorString(cudaGetLastError());
  }
  if (index.tokens != c.seq || index.n_clusters != c.clusters) {
    return ::testing::AssertionFailure() << "index.tokens / n_clusters not set";
  }
  const IvfShape& s = index.shape;
  auto* base = static_cast<unsigned char*>(buffer.get());
  const int64_t h = s.heads, cm = s.max_clusters, n = s.capacity;
  out->means = Copy<float>(base + layout.means, h * s.dim);
  out->centroids = Copy<float>(base + layout.centroids, h * cm * s.dim);
  out->centroids_lp = Copy<unsigned char>(base + layout.centroids_lp, h * cm * s.dim * 2);
  out->offsets = Copy<int64_t>(base + layout.offsets, h * (cm + 1));
  out->sizes = Copy<int32_t>(base + layout.sizes, h * cm);
  out->ids = Copy<int32_t>(base + layout.ids, h * n);
  out->keys = Copy<unsigned char>(base + layout.keys, h * n * s.dim * 2);
  out->values = Copy<unsigned char>(base + layout.values, h * n * s.value_dim * 2);
  out->value_sums = Copy<float>(base + layout.value_sums, h * cm * s.value_dim);
  out->largest = Copy<int32_t>(base + layout.largest, 1);
  return ::testing::AssertionSuccess();
}

::testing::AssertionResult CheckBuild(const Case& c) {
  const HostArray keys = Keys(c, static_cast<uint64_t>(c.seq * 31 + c.dim));
  const HostArray values = Values(c, 77);
  Built got;
  if (auto r = BuildOn(c, keys, values, nullptr, &got); !r) return r;
  const int64_t cm = c.max_clusters > 0 ? c.max_clusters : c.clusters;
  const int64_t cap = c.capacity > 0 ? c.capacity : c.seq;
  const int64_t d = c.dim, dv = c.value_dim, per = c.clusters / c.segments;

  ref::IvfShape shape;
  shape.heads = c.heads;
  shape.seq = c.seq;
  shape.dim = d;
  shape.clusters = c.clusters;
  shape.segments = c.segments;
  shape.n_iters = 0;  // only its means are compared
  const ref::IvfIndexReference want = ref::ivf_build(keys, shape);
  int32_t largest = 0;
  for (int64_t h = 0; h < c.heads; ++h) {
    for (int64_t e = 0; e < d; ++e) {
      const double m = want.means[h * d + e];
      if (!(std::abs(got.means[h * d + e] - m) <= 1e-5 * (1 + std::abs(m)))) {
        return ::testing::AssertionFailure() << "head " << h << " mean " << e << ": "
                                             << got.means[h * d + e] << ", reference " << m;
      }
    }
    // CSR: ranges cover [0, S) in order; slots past the clusters empty.
    const int64_t* off = &got.offsets[h * (cm + 1)];
    if (off[0] != 0 || off[cm] != c.seq) {
      return ::testing::AssertionFailure()
             << "head " << h << ": offsets from " << off[0] << " to " << off[cm];
    }
    std::vector<int32_t> label(static_cast<size_t>(c.seq), -1);
    for (int64_t j = 0; j < cm; ++j) {
      const int64_t size = off[j + 1] - off[j];
      if (size < 0 || got.sizes[h * cm + j] != size || (j >= c.clusters && size != 0)) {
        return ::testing::AssertionFailure()
               << "head " << h << " cluster " << j << ": range " << off[j] << ".." << off[j + 1]
               << ", size " << got.sizes[h * cm + j];
      }
      largest = std::max<int32_t>(largest, static_cast<int32_t>(size));
      double norm = 0;
      for (int64_t e = 0; e < d; ++e) {
        const float v = got.centroids[(h * cm + j) * d + e];
        norm += static_cast<double>(v) * v;
        HostArray lp(c.dtype, 1);
        lp.set(0, v);
        if (std::memcmp(lp.data(), &got.centroids_lp[((h * cm + j) * d + e) * 2], 2) != 0) {
          return ::testing::AssertionFailure()
                 << "head " << h << " centroid " << j << ": its rounded copy differs at " << e;
        }
      }
      if (j >= c.clusters ? norm != 0 : !(std::abs(norm - 1) < 1e-4 || norm == 0)) {
        return ::testing::AssertionFailure()
               << "head " << h << " centroid " << j << ": |c|^2 = " << norm;
      }
      int64_t previous = -1;
      std::vector<double> sum(static_cast<size_t>(dv), 0.0);
      for (int64_t p = off[j]; p < off[j + 1]; ++p) {
        const int32_t t = got.ids[h * cap + p];
        if (t <= previous || t >= c.seq || label[t] != -1) {
          return ::testing::AssertionFailure()
                 << "head " << h << " cluster " << j << ": id " << t << " after " << previous;
        }
        previous = t;
        label[t] = static_cast<int32_t>(j);
        if (std::memcmp(&got.keys[(h * cap + p) * d * 2],
                        static_cast<const unsigned char*>(keys.data()) + (h * c.seq + t) * d * 2,
                        static_cast<size_t>(d * 2)) != 0) {
          return ::testing::AssertionFailure()
                 << "head " << h << " place " << p << ": key of " << t << " not copied";
        }
        if (dv > 0 &&
            std::memcmp(&got.values[(h * cap + p) * dv * 2],
                        static_cast<const unsigned char*>(values.data()) + (h * c.seq + t) * dv * 2,
                        static_cast<size_t>(dv * 2)) != 0) {
          return ::testing::AssertionFailure()
                 << "head " << h << " place " << p << ": value of " << t << " not copied";
        }
        for (int64_t e = 0; e < dv; ++e)
          sum[e] += values.get((h * c.seq + t) * dv + e);
      }
      for (int64_t e = 0; e < dv; ++e) {
        const double g = got.value_sums[(h * cm + j) * dv + e];
        const double tol = 1e-5 * (1 + static_cast<double>(off[j + 1] - off[j]));
        if (!(std::abs(g - sum[e]) <= tol)) {
          return ::testing::AssertionFailure() << "head " << h << " cluster " << j << " value sum "
                                               << e << ": " << g << ", " << sum[e];
        }
      }
    }
    // Each token's cluster: the largest inner product among the returned centroids (global
    // pass), or one of its segment's.
    std::vector<double> centroids(static_cast<size_t>(c.clusters * d));
    for (int64_t j = 0; j < c.clusters; ++j) {
      for (int64_t e = 0; e < d; ++e)
        centroids[j * d + e] = got.centroids[(h * cm + j) * d + e];
    }
    ref::KmeansLayout one;
    one.batch = 1;
    one.n = c.seq;
    one.d = d;
    one.ld = d;
    one.batch_stride = c.seq * d;
    HostArray head(c.dtype, c.seq * d);
    std::memcpy(head.data(), static_cast<const unsigned char*>(keys.data()) + h * c.seq * d * 2,
                static_cast<size_t>(c.seq * d * 2));
    const std::vector<double> mean(got.means.begin() + h * d, got.means.begin() + (h + 1) * d);
    const ref::KmeansReference nearest =
        ref::kmeans_assign(head, one, centroids, c.clusters, mean, KmeansMetric::kCosine);
    const double eps = c.dtype == DType::kBFloat16 ? 0x1p-8 : 0x1p-11;
    for (int64_t t = 0; t < c.seq; ++t) {
      if (label[t] < 0) {
        return ::testing::AssertionFailure() << "head " << h << ": token " << t << " in no cluster";
      }
      if (c.global_pass) {
        if (label[t] != nearest.labels[t] && nearest.margins[t] > 32 * eps) {
          return ::testing::AssertionFailure()
                 << "head " << h << " token " << t << ": cluster " << label[t] << ", nearest "
                 << nearest.labels[t] << " (margin " << nearest.margins[t] << ")";
        }
      } else {
        int64_t begin = 0, end = 0, g = 0;
        for (; g < c.segments; ++g) {
          ref::ivf_segment(c.seq, c.segments, g, &begin, &end);
          if (t < end) break;
        }
        if (label[t] < g * per || label[t] >= (g + 1) * per) {
          return ::testing::AssertionFailure() << "head " << h << " token " << t << " (segment "
                                               << g << "): cluster " << label[t];
        }
      }
    }
  }
  if (got.largest[0] != largest) {
    return ::testing::AssertionFailure()
           << "largest " << got.largest[0] << ", sizes say " << largest;
  }
  // The same bits on another stream.
  cudaStream_t stream = nullptr;
  if (cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) != cudaSuccess) {
    return ::testing::AssertionFailure() << "stream";
  }
  Built again;
  auto r = BuildOn(c, keys, values, stream, &again);
  cudaStreamDestroy(stream);
  if (!r) return r;
  if (again.offsets != got.offsets || again.ids != got.ids || again.centroids != got.centroids ||
      again.value_sums != got.value_sums) {
    return ::testing::AssertionFailure() << "another run differs";
  }
  return ::testing::AssertionSuccess();
}

class IvfBuildCases : public ::testing::TestWithParam<Case> {};

TEST_P(IvfBuildCases, Layout) {
  if (!HasTensorCores()) GTEST_SKIP() << "needs compute capability 7.5";
  EXPECT_TRUE(CheckBuild(GetParam()));
}

std::vector<Case> Cases() {
  std::vector<Case> cases;
  for (DType dtype : {DType::kFloat16, DType::kBFloat16}) {
    for (bool global : {true, false}) {
      Case c;
      c.dtype = dtype;
      c.global_pass = global;
      c.heads = 3;
      c.seq = 1000;  // segments of 334, 333, 333
      c.dim = 64;
      c.value_dim = 32;
      c.clusters = 24;
      c.segments = 3;
      c.capacity = 1100;
      c.max_clusters = 30;
      cases.push_back(c);
    }
    Case wide;
    wide.dtype = dtype;
    wide.heads = 2;
    wide.seq = 4099;
    wide.dim = 128;
    wide.clusters = 64;
    wide.segments = 4;
    cases.push_back(wide);
    Case odd;
    odd.dtype = dtype;
    odd.heads = 1;
    odd.seq = 7;
    odd.dim = 96;
    odd.value_dim = 256;
    odd.clusters = 2;
    odd.segments = 2;
    cases.push_back(odd);
    // More slots than kPlaceFewSlots (heads x max_clusters): keys and values placed with their
    // sums in one kernel, rows of two 16-byte pieces a lane, spare slots past the clusters.
    Case many;
    many.dtype = dtype;
    many.global_pass = false;
    many.n_iters = 1;
    many.seq = 4200;
    many.dim = 128;
    many.value_dim = 200;
    many.clusters = 4096;
    many.segments = 8;
    many.capacity = 4300;
    many.max_clusters = 8300;
    cases.push_back(many);
    // 4096 clusters: the pruned global pass (groups of centroids in chunks, the tokens in group
    // order), and the dense one beside it. gpu.ivf_pruned_everywhere runs every case pruned
    // (from 64 clusters), the odd lengths and 96 and 256 dimensions below among them.
    for (bool prune : {true, false}) {
      Case pruned;
      pruned.dtype = dtype;
      pruned.prune = prune;
      pruned.seq = 8201;
      pruned.dim = 128;
      pruned.value_dim = 32;
      pruned.clusters = 4096;
      pruned.segments = 2;
      cases.push_back(pruned);
    }
    Case narrow;
    narrow.dtype = dtype;
    narrow.seq = 4097;
    narrow.dim = 96;
    narrow.clusters = 1280;
    narrow.segments = 5;
    cases.push_back(narrow);
    Case broad;
    broad.dtype = dtype;
    broad.seq = 2500;
    broad.dim = 256;
    broad.value_dim = 16;
    broad.clusters = 1024;
    cases.push_back(broad);
    Case one;
    one.dtype = dtype;
    one.seq = 1;
    one.dim = 256;
    one.value_dim = 8;
    one.clusters = 1;
    cases.push_back(one);
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(All, IvfBuildCases, ::testing::ValuesIn(Cases()));

/// A built index kept on the device, with its state read back as the reference's index.
struct DeviceIndex {
  IvfIndex index;
  IvfLayout layout;
  DeviceBuffer buffer, keys, values, workspace;
  ref::IvfIndexReference state;
};

::testing::AssertionResult BuildKept(const Case& c, const HostArray& keys, DeviceIndex* out) {
  IvfIndex& index = out->index;
  index.shape.heads = c.heads;
  index.shape.dim = c.dim;
  index.shape.value_dim = 0;
  index.shape.capacity = c.capacity > 0 ? c.capacity : c.seq;
  index.shape.max_clusters = c.max_clusters > 0 ? c.max_clusters : c.clusters;
  index.shape.dtype = c.dtype;
  IvfInput input;
  input.seq = c.seq;
  IvfBuildParams params;
  params.n_clusters = c.clusters;
  params.n_segments = c.segments;
  params.n_iters = c.n_iters;
  size_t bytes = 0;
  if (!ivf_index_size(index.shape, &out->layout).ok() ||
      !ivf_build_workspace_size(index.shape, input, params, &bytes).ok() ||
      !out->buffer.allocate(static_cast<int64_t>(out->layout.bytes)).ok() ||
      !out->keys.allocate(keys.size_bytes()).ok() ||
      !out->workspace.allocate(static_cast<int64_t>(bytes)).ok()) {
    return ::testing::AssertionFailure() << "sizes or allocation";
  }
  cudaMemcpy(out->keys.get(), keys.data(), static_cast<size_t>(keys.size_bytes()),
             cudaMemcpyHostToDevice);
  // Poisoned, so that a part the build should write and does not shows up in the comparisons.
  cudaMemset(out->buffer.get(), 0xff, out->layout.bytes);
  index.data = out->buffer.get();
  input.keys = out->keys.get();
  if (Status s = ivf_build(input, params, &index, out->workspace.get(), bytes, nullptr); !s.ok()) {
    return ::testing::AssertionFailure() << s.to_string();
  }
  if (cudaDeviceSynchronize() != cudaSuccess) return ::testing::AssertionFailure() << "build";
  const int64_t h = c.heads, cm = index.shape.max_clusters, cap = index.shape.capacity;
  auto* base = static_cast<unsigned char*>(out->buffer.get());
  const std::vector<float> means = Copy<float>(base + out->layout.means, h * c.dim);
  // The search scores clusters with the centroids in the keys' dtype: the reference ranks by them.
  HostArray centroids(c.dtype, h * cm * c.dim);
  cudaMemcpy(centroids.data(), base + out->layout.centroids_lp,
             static_cast<size_t>(centroids.size_bytes()), cudaMemcpyDeviceToHost);
  const std::vector<int64_t> offsets = Copy<int64_t>(base + out->layout.offsets, h * (cm + 1));
  const std::vector<int32_t> ids = Copy<int32_t>(base + out->layout.ids, h * cap);
  ref::IvfIndexReference& st = out->state;
  st.shape.heads = c.heads;
  st.shape.seq = c.seq;
  st.shape.dim = c.dim;
  st.shape.clusters = c.clusters;
  st.shape.segments = c.segments;
  st.means.assign(means.begin(), means.end());
  st.centroids.resize(static_cast<size_t>(h * c.clusters * c.dim));
  st.offsets.resize(static_cast<size_t>(h * (c.clusters + 1)));
  st.ids.resize(static_cast<size_t>(h * c.seq));
  st.labels.resize(static_cast<size_t>(h * c.seq));
  for (int64_t hh = 0; hh < h; ++hh) {
    for (int64_t j = 0; j < c.clusters; ++j) {
      for (int64_t e = 0; e < c.dim; ++e)
        st.centroids[(hh * c.clusters + j) * c.dim + e] = centroids.get((hh * cm + j) * c.dim + e);
    }
    for (int64_t j = 0; j <= c.clusters; ++j)
      st.offsets[hh * (c.clusters + 1) + j] = offsets[hh * (cm + 1) + j];
    for (int64_t p = 0; p < c.seq; ++p)
      st.ids[hh * c.seq + p] = ids[hh * cap + p];
    for (int64_t j = 0; j < c.clusters; ++j) {
      for (int64_t p = offsets[hh * (cm + 1) + j]; p < offsets[hh * (cm + 1) + j + 1]; ++p)
        st.labels[hh * c.seq + ids[hh * cap + p]] = static_cast<int32_t>(j);
    }
  }
  return ::testing::AssertionSuccess();
}

struct SearchCase {
  Case build;
  int64_t q_heads = 0, n_queries = 0, k = 0, n_probe = 0, max_candidates = 0;
};

std::ostream& operator<<(std::ostream& os, const SearchCase& c) {
  return os << c.build << " Hq=" << c.q_heads << " Q=" << c.n_queries << " k=" << c.k
            << " n_probe=" << c.n_probe << " max_candidates=" << c.max_candidates;
}

/// Queries near the keys of their kv head (so that the probes find something), in the keys' dtype.
HostArray Queries(const SearchCase& c, const HostArray& keys, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0.0, 0.3);
  const int64_t d = c.build.dim, group = c.q_heads / c.build.heads;
  HostArray q(c.build.dtype, c.q_heads * c.n_queries * d);
  for (int64_t g = 0; g < c.q_heads; ++g) {
    for (int64_t i = 0; i < c.n_queries; ++i) {
      const int64_t t = static_cast<int64_t>(rng() % static_cast<uint64_t>(c.build.seq));
      for (int64_t e = 0; e < d; ++e) {
        q.set((g * c.n_queries + i) * d + e,
              keys.get(((g / group) * c.build.seq + t) * d + e) + normal(rng));
      }
    }
  }
  return q;
}

::testing::AssertionResult CheckSearch(const SearchCase& c) {
  const HostArray keys = Keys(c.build, 11);
  DeviceIndex dev;
  if (auto r = BuildKept(c.build, keys, &dev); !r) return r;
  const HostArray queries = Queries(c, keys, 12);
  const int64_t rows = c.q_heads * c.n_queries, results = rows * c.k;
  DeviceBuffer d_queries, scores, ids, workspace;
  IvfQueries q;
  q.q_heads = c.q_heads;
  q.n_queries = c.n_queries;
  IvfSearchParams params;
  params.k = c.k;
  params.n_probe = c.n_probe;
  params.max_candidates = c.max_candidates;
  size_t bytes = 0;
  if (Status s = ivf_search_workspace_size(dev.index, q, params, &bytes); !s.ok()) {
    return ::testing::AssertionFailure() << s.to_string();
  }
  if (!d_queries.allocate(queries.size_bytes()).ok() || !scores.allocate(results * 4).ok() ||
      !ids.allocate(results * 8).ok() || !workspace.allocate(static_cast<int64_t>(bytes)).ok()) {
    return ::testing::AssertionFailure() << "allocation";
  }
  cudaMemcpy(d_queries.get(), queries.data(), static_cast<size_t>(queries.size_bytes()),
             cudaMemcpyHostToDevice);
  cudaMemset(scores.get(), 0xff, static_cast<size_t>(results * 4));
  cudaMemset(ids.get(), 0x7f, static_cast<size_t>(results * 8));
  q.data = d_queries.get();
  if (Status s = ivf_search(dev.index, q, params, scores.as<float>(), ids.as<int64_t>(),
                            workspace.get(), bytes, nullptr);
      !s.ok()) {
    return ::testing::AssertionFailure() << s.to_string();
  }
  if (cudaDeviceSynchronize() != cudaSuccess) return ::testing::AssertionFailure() << "search";
  const std::vector<float> got_scores = Copy<float>(scores.get(), results);
  const std::vector<int64_t> got_ids = Copy<int64_t>(ids.get(), results);
  const ref::IvfSearchReference want =
      ref::ivf_search(dev.state, keys, queries, c.q_heads, c.n_queries, c.k, c.n_probe);
  for (int64_t i = 0; i < results; ++i) {
    const double w = want.scores[i], g = got_scores[i];
    if (std::isinf(w) || std::isinf(g)) {
      if (w != g || got_ids[i] != -1) {
        return ::testing::AssertionFailure() << "result " << i << ": (" << g << ", " << got_ids[i]
                                             << "), reference (" << w << ", " << want.ids[i] << ")";
      }
      continue;
    }
    const double tol = 1e-5 * (1 + std::abs(w)) * static_cast<double>(c.build.dim);
    if (!(std::abs(g - w) <= tol)) {
      return ::testing::AssertionFailure()
             << "result " << i << ": score " << g << ", reference " << w << " (id " << got_ids[i]
             << ", reference " << want.ids[i] << ")";
    }
    // Ids may differ only between scores the float32 sums cannot tell apart.
    if (got_ids[i] != want.ids[i]) {
      const int64_t row = i / c.k;
      bool near = false;
      for (int64_t j = row * c.k; j < (row + 1) * c.k; ++j) {
        near = near || (j != i && std::abs(want.scores[j] - w) <= 2 * tol);
      }
      if (!near) {
        return ::testing::AssertionFailure()
               << "result " << i << ": id " << got_ids[i] << ", reference " << want.ids[i]
               << " (score " << w << ")";
      }
    }
  }
  return ::testing::AssertionSuccess();
}

class IvfSearchCases : public ::testing::TestWithParam<SearchCase> {};

TEST_P(IvfSearchCases, MatchesReference) {
  if (!HasTensorCores()) GTEST_SKIP() << "needs compute capability 7.5";
  EXPECT_TRUE(CheckSearch(GetParam()));
}

/// A search case: heads x seq keys of dim dimensions into clusters by segments, n_iters each;
/// q_heads query heads of n_queries queries; the k best of n_probe clusters.
SearchCase Search(DType dtype, int64_t heads, int64_t seq, int64_t dim, int64_t clusters,
                  int64_t segments, int n_iters, int64_t q_heads, int64_t n_queries, int64_t k,
                  int64_t n_probe) {
  SearchCase c;
  c.build.dtype = dtype;
  c.build.heads = heads;
  c.build.seq = seq;
  c.build.dim = dim;
  c.build.clusters = clusters;
  c.build.segments = segments;
  c.build.n_iters = n_iters;
  c.q_heads = q_heads;
  c.n_queries = n_queries;
  c.k = k;
  c.n_probe = n_probe;
  return c;
}

std::vector<SearchCase> SearchCases() {
  std::vector<SearchCase> cases;
  for (DType dtype : {DType::kFloat16, DType::kBFloat16}) {
    SearchCase c = Search(dtype, 2, 1500, 64, 30, 3, 4, 8, 3, 50, 4);  // query groups of 4
    c.build.capacity = 1600;
    c.build.max_clusters = 40;
    cases.push_back(c);
    c.n_probe = 30;  // every cluster: the exact top k
    cases.push_back(c);
    c.n_probe = 1;  // fewer candidates than k: padding
    c.k = 700;
    cases.push_back(c);
    c.k = 20;
    c.n_probe = 5;
    c.max_candidates = 1500;
    cases.push_back(c);
    SearchCase wide = Search(dtype, 1, 2049, 128, 32, 2, 4, 1, 5, 100, 6);
    cases.push_back(wide);
    wide.build.dim = 96;  // lanes with one 8-value chunk of 96 and none of the rest
    wide.k = 7;
    wide.n_probe = 31;
    cases.push_back(wide);
    // More rows per kv head than a score block holds, more clusters than a select's digit, the
    // largest k, every cluster probed: the exact top k.
    SearchCase big = Search(dtype, 2, 5001, 256, 2400, 3, 3, 4, 9, kIvfMaxK, 2400);
    cases.push_back(big);
    big.k = 333;
    big.n_probe = 77;
    cases.push_back(big);
    // Rows longer than a block's registers hold (8192 items): more clusters and more candidates
    // than that (every cluster probed: the exact top k), then some of them.
    SearchCase tiled = Search(dtype, 1, 17000, 64, 16400, 1, 1, 2, 2, 1000, 16400);
    cases.push_back(tiled);
    tiled.n_probe = 3000;
    cases.push_back(tiled);
    // Repeated keys: every token of a cluster scores the same, and most clusters are empty, so
    // that a selection's bins are crowded with ties (broken by the lower id); then fewer repeats,
    // a few equal scores in a bin.
    SearchCase ties = Search(dtype, 2, 5001, 64, 600, 3, 3, 4, 3, 1000, 100);
    ties.build.distinct = 7;
    cases.push_back(ties);
    ties.build.distinct = 1200;
    ties.k = 300;
    ties.n_probe = 60;
    cases.push_back(ties);
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(All, IvfSearchCases, ::testing::ValuesIn(SearchCases()));

/// The k best of `queries` against `index`, host copies (scores then ids as doubles).
std::vector<double> SearchOn(const IvfIndex& index, const HostArray& queries, int64_t q_heads,
                             int64_t n_queries, int64_t k, int64_t n_probe) {
  IvfQueries q;
  q.q_heads = q_heads;
  q.n_queries = n_queries;
  IvfSearchParams params;
  params.k = k;
  params.n_probe = n_probe;
  size_t bytes = 0;
  EXPECT_TRUE(ivf_search_workspace_size(index, q, params, &bytes).ok());
  const int64_t results = q_heads * n_queries * k;
  DeviceBuffer d_queries, scores, ids, workspace;
  EXPECT_TRUE(d_queries.allocate(queries.size_bytes()).ok() && scores.allocate(results * 4).ok() &&
              ids.allocate(results * 8).ok() &&
              workspace.allocate(static_cast<int64_t>(bytes)).ok());
  cudaMemcpy(d_queries.get(), queries.data(), static_cast<size_t>(queries.size_bytes()),
             cudaMemcpyHostToDevice);
  q.data = d_queries.get();
  EXPECT_TRUE(ivf_search(index, q, params, scores.as<float>(), ids.as<int64_t>(), workspace.get(),
                         bytes, nullptr)
                  .ok());
  const std::vector<float> s = Copy<float>(scores.get(), results);
  const std::vector<int64_t> i = Copy<int64_t>(ids.get(), results);
  std::vector<double> out(s.begin(), s.end());
  out.insert(out.end(), i.begin(), i.end());
  return out;
}

// Built over the first tokens, extended by the rest: the new tokens in clusters of their own
// after the built ones, positions continued; probing every cluster is exact search over all.
/// The clusters and the retrieved blocks of `c` (group or not) against the reference's ranking
/// and the index's own contents.
::testing::AssertionResult CheckRetrieve(const SearchCase& c, bool group, int64_t max_tokens) {
  const HostArray keys = Keys(c.build, 13);
  DeviceIndex dev;
  if (auto r = BuildKept(c.build, keys, &dev); !r) return r;
  const HostArray queries = Queries(c, keys, 17);
  const int64_t d = c.build.dim, cap = dev.index.shape.capacity;
  const int64_t cm = dev.index.shape.max_clusters, C = c.build.clusters;
  const int64_t rows = (group ? c.build.heads : c.q_heads) * c.n_queries;
  DeviceBuffer d_queries, d_clusters, workspace;
  IvfQueries q;
  q.q_heads = c.q_heads;
  q.n_queries = c.n_queries;
  IvfProbeParams probe;
  probe.n_probe = c.n_probe;
  probe.group = group;
  size_t bytes = 0;
  if (Status s = ivf_clusters_workspace_size(dev.index, q, probe, &bytes); !s.ok()) {
    return ::testing::AssertionFailure() << s.to_string();
  }
  if (!d_queries.allocate(queries.size_bytes()).ok() ||
      !d_clusters.allocate(rows * c.n_probe * 4).ok() ||
      !workspace.allocate(static_cast<int64_t>(bytes)).ok()) {
    return ::testing::AssertionFailure() << "allocation";
  }
  cudaMemcpy(d_queries.get(), queries.data(), static_cast<size_t>(queries.size_bytes()),
             cudaMemcpyHostToDevice);
  cudaMemset(d_clusters.get(), 0x7f, static_cast<size_t>(rows * c.n_probe * 4));
  q.data = d_queries.get();
  if (Status s = ivf_clusters(dev.index, q, probe, d_clusters.as<int32_t>(), workspace.get(), bytes,
                              nullptr);
      !s.ok()) {
    return ::testing::AssertionFailure() << s.to_string();
  }
  if (cudaDeviceSynchronize() != cudaSuccess) return ::testing::AssertionFailure() << "clusters";
  const std::vector<int32_t> got = Copy<int32_t>(d_clusters.get(), rows * c.n_probe);
  const std::vector<double> scores =
      ref::ivf_cluster_scores(dev.state, queries, c.q_heads, c.n_queries, group);
  const std::vector<int32_t> want =
      ref::ivf_clusters(dev.state, queries, c.q_heads, c.n_queries, c.n_probe, group);
  for (int64_t r = 0; r < rows; ++r) {
    const int32_t* g = got.data() + r * c.n_probe;
    const int32_t* w = want.data() + r * c.n_probe;
    const double* sc = scores.data() + r * C;
    // The chosen set may differ from the reference's only between scores float32 cannot tell
    // apart: every chosen cluster scores within a tolerance of every one left out.
    double lowest_in = INFINITY, highest_out = -INFINITY;
    std::vector<bool> in(static_cast<size_t>(C), false);
    for (int64_t j = 0; j < c.n_probe; ++j) {
      if ((g[j] < 0) != (w[j] < 0)) {
        return ::testing::AssertionFailure()
               << "row " << r << " slot " << j << ": " << g[j] << ", reference " << w[j];
      }
      if (g[j] < 0) continue;
      if (g[j] >= C || (j > 0 && g[j] <= g[j - 1]) || sc[g[j]] == -INFINITY) {
        return ::testing::AssertionFailure()
               << "row " << r << ": cluster " << g[j] << " out of order, range or empty";
      }
      in[static_cast<size_t>(g[j])] = true;
      lowest_in = std::min(lowest_in, sc[g[j]]);
    }
    for (int64_t j = 0; j < C; ++j) {
      if (!in[static_cast<size_t>(j)]) highest_out = std::max(highest_out, sc[j]);
    }
    if (highest_out > lowest_in + 1e-5 * (1 + std::abs(lowest_in))) {
      return ::testing::AssertionFailure() << "row " << r << ": a cluster left out scores "
                                           << highest_out << " above a chosen one's " << lowest_in;
    }
  }
  if (!group) return ::testing::AssertionSuccess();
  // The retrieval: each row's chosen clusters' tokens, in order, from the index's own copies.
  IvfRetrieveParams params;
  params.probe = probe;
  params.max_tokens = max_tokens;
  if (Status s = ivf_retrieve_workspace_size(dev.index, q, params, &bytes); !s.ok()) {
    return ::testing::AssertionFailure() << s.to_string();
  }
  const int64_t places = rows * max_tokens;
  DeviceBuffer out_keys, out_ids, out_lengths, ws2;
  if (!out_keys.allocate(places * d * 2).ok() || !out_ids.allocate(places * 8).ok() ||
      !out_lengths.allocate(rows * 8).ok() || !ws2.allocate(static_cast<int64_t>(bytes)).ok()) {
    return ::testing::AssertionFailure() << "allocation";
  }
  cudaMemset(out_keys.get(), 0x55, static_cast<size_t>(places * d * 2));
  cudaMemset(out_ids.get(), 0x55, static_cast<size_t>(places * 8));
  cudaMemset(out_lengths.get(), 0x55, static_cast<size_t>(rows * 8));
  IvfRetrieved out;
  out.keys = out_keys.get();
  out.ids = out_ids.as<int64_t>();
  out.lengths = out_lengths.as<int64_t>();
  IvfRetrieved with_values = out;
  with_values.values = out_keys.get();
  if (Status s = ivf_retrieve(dev.index, q, params, with_values, ws2.get(), bytes, nullptr);
      s.code() != StatusCode::kInvalidArgument) {
    return ::testing::AssertionFailure() << "values of an index without values: " << s.to_string();
  }
  if (Status s = ivf_retrieve(dev.index, q, params, out, ws2.get(), bytes, nullptr); !s.ok()) {
    return ::testing::AssertionFailure() << s.to_string();
  }
  if (cudaDeviceSynchronize() != cudaSuccess) return ::testing::AssertionFailure() << "retrieve";
  const std::vector<uint16_t> got_keys = Copy<uint16_t>(out_keys.get(), places * d);
  const std::vector<int64_t> got_ids = Copy<int64_t>(out_ids.get(), places);
  const std::vector<int64_t> got_lengths = Copy<int64_t>(out_lengths.get(), rows);
  auto* base = static_cast<unsigned char*>(dev.buffer.get());
  const int64_t h_count = c.build.heads;
  const std::vector<uint16_t> index_keys =
      Copy<uint16_t>(base + dev.layout.keys, h_count * cap * d);
  const std::vector<int32_t> index_ids = Copy<int32_t>(base + dev.layout.ids, h_count * cap);
  const std::vector<int64_t> offsets = Copy<int64_t>(base + dev.layout.offsets, h_count * (cm + 1));
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t h = r / c.n_queries;
    std::vector<int64_t> slots;
    for (int64_t j = 0; j < c.n_probe; ++j) {
      const int32_t cl = got[static_cast<size_t>(r * c.n_probe + j)];
      if (cl < 0) continue;
      for (int64_t t = offsets[h * (cm + 1) + cl]; t < offsets[h * (cm + 1) + cl + 1]; ++t)
        slots.push_back(t);
    }
    const int64_t len = std::min<int64_t>(static_cast<int64_t>(slots.size()), max_tokens);
    if (got_lengths[r] != len) {
      return ::testing::AssertionFailure()
             << "row " << r << ": length " << got_lengths[r] << ", expected " << len;
    }
    for (int64_t i = 0; i < max_tokens; ++i) {
      const int64_t at = i < len ? slots[static_cast<size_t>(i)] : -1;
      const int64_t want_id = at >= 0 ? index_ids[h * cap + at] : -1;
      if (got_ids[r * max_tokens + i] != want_id) {
        return ::testing::AssertionFailure()
               << "row " << r << " place " << i << ": id " << got_ids[r * max_tokens + i]
               << ", expected " << want_id;
      }
      for (int64_t e = 0; e < d; ++e) {
        const uint16_t want_bits = at >= 0 ? index_keys[(h * cap + at) * d + e] : 0;
        if (got_keys[(r * max_tokens + i) * d + e] != want_bits) {
          return ::testing::AssertionFailure()
                 << "row " << r << " place " << i << ": key value " << e << " differs";
        }
      }
    }
  }
  return ::testing::AssertionSuccess();
}

TEST(IvfRetrieve, ClustersAndBlocks) {
  for (DType dtype : {DType::kFloat16, DType::kBFloat16}) {
    SearchCase c;
    c.build.dtype = dtype;
    c.build.heads = 2;
    c.build.seq = 1500;
    c.build.dim = 64;
    c.build.clusters = 30;
    c.build.segments = 3;
    c.build.capacity = 1600;
    c.build.max_clusters = 40;
    c.q_heads = 8;  // groups of 4
    c.n_queries = 3;
    c.n_probe = 4;
    EXPECT_TRUE(CheckRetrieve(c, true, 1500)) << c;  // every chosen token fits
    EXPECT_TRUE(CheckRetrieve(c, true, 37)) << c;    // the blocks cut short
    EXPECT_TRUE(CheckRetrieve(c, false, 1)) << c;    // per query head, as the search probes
    c.n_probe = 30;                                  // every cluster
    EXPECT_TRUE(CheckRetrieve(c, true, 1500)) << c;
    c.build.dim = 128;
    c.build.seq = 3000;
    c.build.clusters = 600;  // more clusters than a select's digit
    c.build.capacity = 0;
    c.build.max_clusters = 0;
    c.q_heads = 2;     // no grouping
    c.n_queries = 20;  // more rows per kv head than a score block holds
    c.n_probe = 77;
    EXPECT_TRUE(CheckRetrieve(c, true, 500)) << c;
    EXPECT_TRUE(CheckRetrieve(c, false, 1)) << c;
  }
}

TEST(IvfExtend, AppendsASegment) {
  if (!HasTensorCores()) GTEST_SKIP() << "needs compute capability 7.5";
  for (DType dtype : {DType::kFloat16, DType::kBFloat16}) {
    SearchCase c;
    c.build.dtype = dtype;
    c.build.heads = 2;
    c.build.seq = 1400;  // built: 1000, extended: 400
    c.build.dim = 64;
    c.q_heads = 4;
    c.n_queries = 2;
    const HostArray all = Keys(c.build, 31);
    const int64_t built = 1000, added = 400, d = 64;
    const HostArray first = TokenRange(all, 2, 1400, d, 0, built);
    const HostArray rest = TokenRange(all, 2, 1400, d, built, 1400);
    Case b = c.build;
    b.seq = built;
    b.capacity = 1400;
    b.clusters = 20;
    b.segments = 2;
    b.max_clusters = 28;
    DeviceIndex dev;
    ASSERT_TRUE(BuildKept(b, first, &dev));
    DeviceBuffer d_rest, workspace;
    ASSERT_TRUE(d_rest.allocate(rest.size_bytes()).ok());
    cudaMemcpy(d_rest.get(), rest.data(), static_cast<size_t>(rest.size_bytes()),
               cudaMemcpyHostToDevice);
    IvfInput input;
    input.keys = d_rest.get();
    input.seq = added;
    IvfExtendParams params;
    params.n_clusters = 8;
    params.n_iters = 3;
    size_t bytes = 0;
    ASSERT_TRUE(ivf_extend_workspace_size(dev.index, input, params, &bytes).ok());
    ASSERT_TRUE(workspace.allocate(static_cast<int64_t>(bytes)).ok());
    if (dtype == DType::kFloat16) {
      ASSERT_TRUE(ivf_extend(input, params, &dev.index, workspace.get(), bytes, nullptr).ok());
    } else {
      // Captured in a graph on a stream of its own (the placement may start while k-means runs:
      // a dependent launch, captured as such).
      cudaStream_t stream = nullptr;
      ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
      cudaGraph_t graph = nullptr;
      cudaGraphExec_t exec = nullptr;
      ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), cudaSuccess);
      const Status extended = ivf_extend(input, params, &dev.index, workspace.get(), bytes, stream);
      ASSERT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess);
      ASSERT_TRUE(extended.ok()) << extended.message();
      ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
      ASSERT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
      ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
      cudaGraphExecDestroy(exec);
      cudaGraphDestroy(graph);
      cudaStreamDestroy(stream);
    }
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_EQ(dev.index.tokens, 1400);
    EXPECT_EQ(dev.index.n_clusters, 28);
    auto* base = static_cast<unsigned char*>(dev.buffer.get());
    const auto offsets = Copy<int64_t>(base + dev.layout.offsets, 2 * 29);
    const auto ids = Copy<int32_t>(base + dev.layout.ids, 2 * 1400);
    const auto sizes = Copy<int32_t>(base + dev.layout.sizes, 2 * 28);
    for (int64_t h = 0; h < 2; ++h) {
      EXPECT_EQ(offsets[h * 29 + 20], built) << "head " << h;
      EXPECT_EQ(offsets[h * 29 + 28], 1400) << "head " << h;
      for (int64_t j = 0; j < 28; ++j) {
        EXPECT_EQ(sizes[h * 28 + j], offsets[h * 29 + j + 1] - offsets[h * 29 + j])
            << "head " << h << " cluster " << j;
      }
      std::vector<int> seen(1400, 0);
      for (int64_t p = 0; p < 1400; ++p) {
        const int32_t t = ids[h * 1400 + p];
        ASSERT_TRUE(t >= 0 && t < 1400);
        ++seen[t];
        EXPECT_EQ(p < built, t < built) << "head " << h << " place " << p << ": token " << t;
      }
      for (int count : seen)
        EXPECT_EQ(count, 1);
    }
    // Every cluster probed: exact search over all 1400 tokens.
    ref::IvfShape shape;
    shape.heads = 2;
    shape.seq = 1400;
    shape.dim = d;
    const HostArray queries = Queries(c, all, 9);
    const ref::IvfSearchReference want =
        ref::exact_search(all, queries, shape, c.q_heads, c.n_queries, 30);
    const std::vector<double> got = SearchOn(dev.index, queries, c.q_heads, c.n_queries, 30, 28);
    for (size_t i = 0; i < want.scores.size(); ++i) {
      EXPECT_NEAR(got[i], want.scores[i], 1e-3 * (1 + std::abs(want.scores[i]))) << i;
    }
  }
}

// Saved and loaded into an index with room to spare: the same search results, bit for bit.
TEST(IvfFile, SaveLoadSearchesTheSame) {
  if (!HasTensorCores()) GTEST_SKIP() << "needs compute capability 7.5";
  SearchCase c;
  c.build.heads = 2;
  c.build.seq = 1200;
  c.build.dim = 64;
  c.build.clusters = 24;
  c.build.segments = 2;
  c.q_heads = 4;
  c.n_queries = 2;
  const HostArray keys = Keys(c.build, 21);
  DeviceIndex dev;
  ASSERT_TRUE(BuildKept(c.build, keys, &dev));
  char dir[] = "/tmp/cudaops-ivf-XXXXXX";
  ASSERT_NE(::mkdtemp(dir), nullptr);
  const std::string path = std::string(dir) + "/index.ivf";
  ASSERT_TRUE(ivf_save(dev.index, path.c_str(), nullptr).ok());
  IvfShape saved;
  ASSERT_TRUE(ivf_saved_shape(path.c_str(), &saved).ok());
  EXPECT_EQ(saved.capacity, 1200);
  EXPECT_EQ(saved.max_clusters, 24);
  IvfIndex loaded;
  loaded.shape = saved;
  loaded.shape.capacity += 100;
  loaded.shape.max_clusters += 5;
  DeviceBuffer buffer;
  ASSERT_TRUE(AllocateIndex(&loaded, &buffer));
  ASSERT_TRUE(ivf_load(path.c_str(), &loaded, nullptr).ok());
  EXPECT_EQ(loaded.tokens, 1200);
  EXPECT_EQ(loaded.n_clusters, 24);
  const HostArray queries = Queries(c, keys, 5);
  EXPECT_EQ(SearchOn(dev.index, queries, c.q_heads, c.n_queries, 30, 4),
            SearchOn(loaded, queries, c.q_heads, c.n_queries, 30, 4));
  // Too small an index for the file: refused, nothing loaded.
  IvfIndex small = loaded;
  small.shape.capacity = 1000;
  EXPECT_EQ(ivf_load(path.c_str(), &small, nullptr).code(), StatusCode::kInvalidArgument);
  const std::string command = std::string("rm -rf '") + dir + "'";
  ASSERT_EQ(std::system(command.c_str()), 0);
}

// Copied into a larger buffer (poisoned), then into one of exactly its size: the same search
// results, bit for bit; the larger copy then takes an extension past the first buffer's room.
TEST(IvfCopy, GrowAndShrinkSearchTheSame) {
  if (!HasTensorCores()) GTEST_SKIP() << "needs compute capability 7.5";
  SearchCase c;
  c.build.heads = 2;
  c.build.seq = 1200;
  c.build.dim = 64;
  c.build.clusters = 24;
  c.build.segments = 2;
  c.q_heads = 4;
  c.n_queries = 2;
  Case both = c.build;  // the tokens built, then those the grown index takes
  both.seq = 2400;
  const HostArray all = Keys(both, 23);
  const HostArray keys = TokenRange(all, 2, 2400, 64, 0, 1200);
  const HostArray rest = TokenRange(all, 2, 2400, 64, 1200, 2400);
  DeviceIndex dev;
  ASSERT_TRUE(BuildKept(c.build, keys, &dev));
  const HostArray queries = Queries(c, keys, 6);
  const std::vector<double> want = SearchOn(dev.index, queries, c.q_heads, c.n_queries, 30, 5);
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  IvfIndex grown;
  grown.shape = dev.index.shape;
  grown.shape.capacity = 2400;
  grown.shape.max_clusters = 48;
  DeviceBuffer big;
  ASSERT_TRUE(AllocateIndex(&grown, &big));
  ASSERT_TRUE(ivf_copy(dev.index, &grown, stream).ok());
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  EXPECT_EQ(grown.tokens, 1200);
  EXPECT_EQ(grown.n_clusters, 24);
  EXPECT_EQ(SearchOn(grown, queries, c.q_heads, c.n_queries, 30, 5), want);
  IvfIndex tight;
  tight.shape = grown.shape;
  tight.shape.capacity = 1200;
  tight.shape.max_clusters = 24;
  DeviceBuffer small;
  ASSERT_TRUE(AllocateIndex(&tight, &small));
  ASSERT_TRUE(ivf_copy(grown, &tight, stream).ok());
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  EXPECT_EQ(SearchOn(tight, queries, c.q_heads, c.n_queries, 30, 5), want);
  // The grown index takes 1200 more tokens: every cluster probed is then exact search.
  DeviceBuffer d_rest, workspace;
  ASSERT_TRUE(d_rest.allocate(rest.size_bytes()).ok());
  cudaMemcpy(d_rest.get(), rest.data(), static_cast<size_t>(rest.size_bytes()),
             cudaMemcpyHostToDevice);
  IvfInput input;
  input.keys = d_rest.get();
  input.seq = 1200;
  IvfExtendParams params;
  params.n_clusters = 24;
  params.n_iters = 3;
  size_t bytes = 0;
  ASSERT_TRUE(ivf_extend_workspace_size(grown, input, params, &bytes).ok());
  ASSERT_TRUE(workspace.allocate(static_cast<int64_t>(bytes)).ok());
  ASSERT_TRUE(ivf_extend(input, params, &grown, workspace.get(), bytes, stream).ok());
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  EXPECT_EQ(grown.tokens, 2400);
  ref::IvfShape shape;
  shape.heads = 2;
  shape.seq = 2400;
  shape.dim = 64;
  const ref::IvfSearchReference exact =
      ref::exact_search(all, queries, shape, c.q_heads, c.n_queries, 30);
  const std::vector<double> got = SearchOn(grown, queries, c.q_heads, c.n_queries, 30, 48);
  for (size_t i = 0; i < exact.scores.size(); ++i) {
    EXPECT_NEAR(got[i], exact.scores[i], 1e-3 * (1 + std::abs(exact.scores[i]))) << i;
  }
  cudaStreamDestroy(stream);
}

}  // namespace
}  // namespace cudaops
