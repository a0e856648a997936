// The decode attention over the index (ivf_attention) on the device: against the double-precision
// reference of the same math over the zones the device ranks (float16, bfloat16; grouped and
// per-head zones; GQA; Q > 1; dims 64, 96, 128, 256; extras of 0, 1 and many tokens); exact full
// attention when every cluster is probed; the estimate exact for clusters of one token; the same
// bits every run, on another stream and under CUDA-graph capture; after an extension and after a
// save and load.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <ostream>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "cudaops/attention.h"
#include "cudaops/ivf.h"
#include "harness/device_buffer.h"
#include "reference/host_array.h"
#include "reference/ivf.h"
#include "support/check_descriptor.h"
#include "support/device_caps.h"

namespace cudaops {
namespace {

using harness::DeviceBuffer;
using ref::HostArray;
using testing::HasTensorCores;

struct AttnCase {
  DType dtype = DType::kFloat16;
  int64_t heads = 2, seq = 2000, dim = 128, value_dim = 128, clusters = 64, segments = 4;
  int64_t q_heads = 8, n_queries = 1, n_probe = 6, n_estimate = 20, extra = 0;
  bool group = true;
  int64_t capacity = 0, max_clusters = 0;  // 0: seq, clusters
};

std::ostream& operator<<(std::ostream& os, const AttnCase& c) {
  return os << dtype_name(c.dtype) << " H=" << c.heads << " S=" << c.seq << " D=" << c.dim
            << " Dv=" << c.value_dim << " C=" << c.clusters << "/" << c.segments
            << " Hq=" << c.q_heads << " Q=" << c.n_queries << " probe=" << c.n_probe
            << " estimate=" << c.n_estimate << " extra=" << c.extra
            << (c.group ? " grouped" : " per head");
}

/// Keys around a few directions per head with a common offset, values Gaussian; queries near
/// keys of their kv head scaled so that the logits spread over several units.
struct Data {
  HostArray keys, values, queries, extra_keys, extra_values;
};

Data Draw(const AttnCase& c, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  Data x;
  x.keys = HostArray(c.dtype, c.heads * c.seq * c.dim);
  x.values = HostArray(c.dtype, c.heads * c.seq * c.value_dim);
  for (int64_t h = 0; h < c.heads; ++h) {
    std::vector<double> offset(static_cast<size_t>(c.dim)), dirs(static_cast<size_t>(8 * c.dim));
    for (double& v : offset)
      v = 0.5 * normal(rng);
    for (double& v : dirs)
      v = normal(rng);
    for (int64_t t = 0; t < c.seq; ++t) {
      const int64_t which = static_cast<int64_t>(rng() % 8);
      for (int64_t e = 0; e < c.dim; ++e)
        x.keys.set((h * c.seq + t) * c.dim + e,
                   offset[e] + dirs[which * c.dim + e] + 0.5 * normal(rng));
    }
  }
  for (int64_t i = 0; i < c.heads * c.seq * c.value_dim; ++i)
    x.values.set(i, normal(rng));
  const int64_t group = c.q_heads / c.heads;
  x.queries = HostArray(c.dtype, c.q_heads * c.n_queries * c.dim);
  for (int64_t g = 0; g < c.q_heads; ++g) {
    for (int64_t q = 0; q < c.n_queries; ++q) {
      const int64_t t = static_cast<int64_t>(rng() % static_cast<uint64_t>(c.seq));
      for (int64_t e = 0; e < c.dim; ++e) {
        const double k = x.keys.get(((g / group) * c.seq + t) * c.dim + e);
        x.queries.set((g * c.n_queries + q) * c.dim + e, 0.5 * k + 0.3 * normal(rng));
      }
    }
  }
  x.extra_keys = HostArray(c.dtype, std::max<int64_t>(c.heads * c.extra * c.dim, 1));
  x.extra_values = HostArray(c.dtype, std::max<int64_t>(c.heads * c.extra * c.value_dim, 1));
  for (int64_t i = 0; i < c.heads * c.extra * c.dim; ++i)
    x.extra_keys.set(i, normal(rng));
  for (int64_t i = 0; i < c.heads * c.extra * c.value_dim; ++i)
    x.extra_values.set(i, normal(rng));
  return x;
}

template <typename T>
std::vector<T> Copy(const void* device, int64_t count) {
  std::vector<T> host(static_cast<size_t>(std::max<int64_t>(count, 0)));
  EXPECT_EQ(cudaMemcpy(host.data(), device, host.size() * sizeof(T), cudaMemcpyDeviceToHost),
            cudaSuccess);
  return host;
}

DeviceBuffer Upload(const HostArray& a) {
  DeviceBuffer d;
  EXPECT_TRUE(d.allocate(std::max<int64_t>(a.size_bytes(), 256)).ok());
  EXPECT_EQ(
      cudaMemcpy(d.get(), a.data(), static_cast<size_t>(a.size_bytes()), cudaMemcpyHostToDevice),
      cudaSuccess);
  return d;
}

/// An index built on the device from `data`, and what the attention needs around it.
struct Indexed {
  IvfIndex index;
  IvfLayout layout;
  DeviceBuffer buffer, keys, values, queries, extra_keys, extra_values;
};

::testing::AssertionResult Build(const AttnCase& c, const Data& x, Indexed* s) {
  IvfIndex& index = s->index;
  index.shape.heads = c.heads;
  index.shape.dim = c.dim;
  index.shape.value_dim = c.value_dim;
  index.shape.capacity = c.capacity > 0 ? c.capacity : c.seq;
  index.shape.max_clusters = c.max_clusters > 0 ? c.max_clusters : c.clusters;
  index.shape.dtype = c.dtype;
  IvfInput input;
  input.seq = c.seq;
  IvfBuildParams params;
  params.n_clusters = c.clusters;
  params.n_segments = c.segments;
  params.n_iters = 4;
  size_t bytes = 0;
  if (Status st = ivf_index_size(index.shape, &s->layout); !st.ok()) {
    return ::testing::AssertionFailure() << st.to_string();
  }
  if (Status st = ivf_build_workspace_size(index.shape, input, params, &bytes); !st.ok()) {
    return ::testing::AssertionFailure() << st.to_string();
  }
  DeviceBuffer workspace;
  if (!s->buffer.allocate(static_cast<int64_t>(s->layout.bytes)).ok() ||
      !workspace.allocate(static_cast<int64_t>(std::max<size_t>(bytes, 256))).ok()) {
    return ::testing::AssertionFailure() << "allocation";
  }
  cudaMemset(s->buffer.get(), 0xff, s->layout.bytes);
  s->keys = Upload(x.keys);
  s->values = Upload(x.values);
  s->queries = Upload(x.queries);
  s->extra_keys = Upload(x.extra_keys);
  s->extra_values = Upload(x.extra_values);
  index.data = s->buffer.get();
  input.keys = s->keys.get();
  input.values = s->values.get();
  if (Status st = ivf_build(input, params, &index, workspace.get(), bytes, nullptr); !st.ok()) {
    return ::testing::AssertionFailure() << st.to_string();
  }
  if (cudaDeviceSynchronize() != cudaSuccess) return ::testing::AssertionFailure() << "build";
  return ::testing::AssertionSuccess();
}

/// What the reference reads of the index, from the device.
ref::IvfAttentionIndex State(const Indexed& s) {
  const IvfShape& sh = s.index.shape;
  const int64_t h = sh.heads, cm = sh.max_clusters, cap = sh.capacity, d = sh.dim;
  const int64_t dv = sh.value_dim, n = s.index.tokens, c = s.index.n_clusters;
  const auto* base = static_cast<const unsigned char*>(s.buffer.get());
  const auto offsets = Copy<int64_t>(base + s.layout.offsets, h * (cm + 1));
  const auto keys = Copy<uint16_t>(base + s.layout.keys, h * cap * d);
  const auto values = Copy<uint16_t>(base + s.layout.values, h * cap * dv);
  const auto means = Copy<uint16_t>(base + s.layout.key_means, h * cm * d);
  const auto sums = Copy<float>(base + s.layout.value_sums, h * cm * dv);
  ref::IvfAttentionIndex x;
  x.heads = h;
  x.tokens = n;
  x.clusters = c;
  x.dim = d;
  x.value_dim = dv;
  x.offsets.resize(static_cast<size_t>(h * (c + 1)));
  x.keys = HostArray(sh.dtype, h * n * d);
  x.values = HostArray(sh.dtype, h * n * dv);
  x.key_means = HostArray(sh.dtype, h * c * d);
  x.value_sums.resize(static_cast<size_t>(h * c * dv));
  for (int64_t hh = 0; hh < h; ++hh) {
    for (int64_t j = 0; j <= c; ++j)
      x.offsets[hh * (c + 1) + j] = offsets[hh * (cm + 1) + j];
    std::copy_n(keys.begin() + hh * cap * d, n * d,
                static_cast<uint16_t*>(x.keys.data()) + hh * n * d);
    std::copy_n(values.begin() + hh * cap * dv, n * dv,
                static_cast<uint16_t*>(x.values.data()) + hh * n * dv);
    std::copy_n(means.begin() + hh * cm * d, c * d,
                static_cast<uint16_t*>(x.key_means.data()) + hh * c * d);
    std::copy_n(sums.begin() + hh * cm * dv, c * dv, x.value_sums.begin() + hh * c * dv);
  }
  return x;
}

IvfQueries QueriesOf(const AttnCase& c, const Indexed& s) {
  IvfQueries q;
  q.data = s.queries.get();
  q.q_heads = c.q_heads;
  q.n_queries = c.n_queries;
  return q;
}

IvfAttentionParams ParamsOf(const AttnCase& c) {
  IvfAttentionParams p;
  p.n_probe = c.n_probe;
  p.n_estimate = c.n_estimate;
  p.group = c.group;
  return p;
}

IvfExtra ExtraOf(const AttnCase& c, const Indexed& s) {
  IvfExtra e;
  e.tokens = c.extra;
  e.keys = c.extra > 0 ? s.extra_keys.get() : nullptr;
  e.values = c.extra > 0 ? s.extra_values.get() : nullptr;
  return e;
}

/// Runs the attention on `stream`: the output's bits and the log-sum-exp.
::testing::AssertionResult Attend(const AttnCase& c, const Indexed& s, cudaStream_t stream,
                                  std::vector<uint16_t>* out, std::vector<float>* lse) {
  const IvfQueries q = QueriesOf(c, s);
  const IvfAttentionParams p = ParamsOf(c);
  const IvfExtra e = ExtraOf(c, s);
  size_t bytes = 0;
  if (Status st = ivf_attention_workspace_size(s.index, q, p, e, &bytes); !st.ok()) {
    return ::testing::AssertionFailure() << st.to_string();
  }
  const int64_t rows = c.q_heads * c.n_queries;
  DeviceBuffer d_out, d_lse, workspace;
  if (!d_out.allocate(std::max<int64_t>(rows * c.value_dim * 2, 256)).ok() ||
      !d_lse.allocate(std::max<int64_t>(rows * 4, 256)).ok() ||
      !workspace.allocate(static_cast<int64_t>(std::max<size_t>(bytes, 256))).ok()) {
    return ::testing::AssertionFailure() << "allocation";
  }
  cudaMemset(d_out.get(), 0xff, static_cast<size_t>(rows * c.value_dim * 2));
  cudaMemset(d_lse.get(), 0xff, static_cast<size_t>(rows * 4));
  cudaMemset(workspace.get(), 0xff, bytes);
  if (Status st = ivf_attention(s.index, q, p, e, d_out.get(), d_lse.as<float>(), workspace.get(),
                                bytes, stream);
      !st.ok()) {
    return ::testing::AssertionFailure() << st.to_string();
  }
  if (cudaStreamSynchronize(stream) != cudaSuccess) {
    return ::testing::AssertionFailure() << "attention";
  }
  *out = Copy<uint16_t>(d_out.get(), rows * c.value_dim);
  *lse = Copy<float>(d_lse.get(), rows);
  return ::testing::AssertionSuccess();
}

/// Each row's n best clusters by the attention's ranking (ivf_clusters).
std::vector<int32_t> Zones(const AttnCase& c, const Indexed& s, int64_t n) {
  const IvfQueries q = QueriesOf(c, s);
  IvfProbeParams p;
  p.n_probe = n;
  p.group = c.group;
  size_t bytes = 0;
  EXPECT_TRUE(ivf_clusters_workspace_size(s.index, q, p, &bytes).ok());
  const int64_t rows = (c.group ? c.heads : c.q_heads) * c.n_queries;
  DeviceBuffer d_clusters, workspace;
  EXPECT_TRUE(d_clusters.allocate(std::max<int64_t>(rows * n * 4, 256)).ok());
  EXPECT_TRUE(workspace.allocate(static_cast<int64_t>(std::max<size_t>(bytes, 256))).ok());
  EXPECT_TRUE(
      ivf_clusters(s.index, q, p, d_clusters.as<int32_t>(), workspace.get(), bytes, nullptr).ok());
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  return Copy<int32_t>(d_clusters.get(), rows * n);
}

/// The relative L2 error of each output row and the error of each log-sum-exp against `want`,
/// within `bound`.
::testing::AssertionResult Near(const AttnCase& c, const std::vector<uint16_t>& got_bits,
                                const std::vector<float>& got_lse, const std::vector<double>& want,
                                const std::vector<double>& want_lse, double bound) {
  HostArray got(c.dtype, static_cast<int64_t>(got_bits.size()));
  std::memcpy(got.data(), got_bits.data(), got_bits.size() * 2);
  const int64_t rows = c.q_heads * c.n_queries;
  for (int64_t r = 0; r < rows; ++r) {
    double num = 0.0, den = 0.0;
    for (int64_t e = 0; e < c.value_dim; ++e) {
      const double w = want[static_cast<size_t>(r * c.value_dim + e)];
      const double g = got.get(r * c.value_dim + e);
      num += (g - w) * (g - w);
      den += w * w;
    }
    const double err = std::sqrt(num / std::max(den, 1e-30));
    if (!(err <= bound)) {
      return ::testing::AssertionFailure()
             << "row " << r << ": relative L2 error " << err << " > " << bound;
    }
    const double wl = want_lse[static_cast<size_t>(r)], gl = got_lse[static_cast<size_t>(r)];
    if (!(std::abs(gl - wl) <= bound * std::max(1.0, std::abs(wl)))) {
      return ::testing::AssertionFailure() << "row " << r << ": lse " << gl << ", want " << wl;
    }
  }
  return ::testing::AssertionSuccess();
}

/// A row's relative L2 error allowed: bfloat16 two of its units (2^-9: the output's rounding
/// alone can take one), float16 1e-3.
double Bound(DType dtype) {
  return dtype == DType::kBFloat16 ? 4e-3 : 1e-3;
}

double Scale(const AttnCase& c) {
  return 1.0 / std::sqrt(static_cast<double>(c.dim));
}

::testing::AssertionResult CheckAgainstReference(const AttnCase& c, const Indexed& s,
                                                 const Data& x) {
  std::vector<uint16_t> out;
  std::vector<float> lse;
  if (auto r = Attend(c, s, nullptr, &out, &lse); !r) return r;
  ref::IvfAttentionZones zones;
  zones.n_exact = c.n_probe;
  zones.exact = Zones(c, s, c.n_probe);
  if (c.n_estimate > 0) {
    zones.n_wide = c.n_probe + c.n_estimate;
    zones.wide = Zones(c, s, zones.n_wide);
  }
  std::vector<double> want, want_lse;
  ref::ivf_attention(State(s), x.queries, c.q_heads, c.n_queries, zones, c.group, x.extra_keys,
                     x.extra_values, c.extra, Scale(c), &want, &want_lse);
  return Near(c, out, lse, want, want_lse, Bound(c.dtype));
}

class IvfAttentionCases : public ::testing::TestWithParam<AttnCase> {};

TEST_P(IvfAttentionCases, MatchesReference) {
  if (!HasTensorCores()) GTEST_SKIP() << "needs compute capability 7.5";
  const AttnCase& c = GetParam();
  const Data x = Draw(c, 21);
  Indexed s;
  ASSERT_TRUE(Build(c, x, &s));
  EXPECT_TRUE(CheckAgainstReference(c, s, x));
}

std::vector<AttnCase> Cases() {
  std::vector<AttnCase> out;
  for (DType dtype : {DType::kFloat16, DType::kBFloat16}) {
    AttnCase c;
    c.dtype = dtype;
    out.push_back(c);  // grouped, GQA 4, estimate
    AttnCase per_head = c;
    per_head.group = false;
    out.push_back(per_head);
    AttnCase many = c;
    many.n_queries = 3;
    many.extra = 68;
    out.push_back(many);
    AttnCase one = c;
    one.extra = 1;
    one.n_estimate = 0;
    out.push_back(one);
    for (int64_t dim : {64, 96, 256}) {
      AttnCase d = c;
      d.dim = dim;
      d.value_dim = dim;
      d.extra = 5;
      out.push_back(d);
    }
    AttnCase mha = c;  // one query head per kv head, odd sizes
    mha.heads = 3;
    mha.q_heads = 3;
    mha.seq = 1999;
    mha.clusters = 60;
    mha.n_probe = 7;
    mha.n_estimate = 13;
    out.push_back(mha);
    AttnCase wide_group = c;  // more query heads per kv head than one block holds
    wide_group.q_heads = 2 * 6;
    wide_group.value_dim = 64;
    out.push_back(wide_group);
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(All, IvfAttentionCases, ::testing::ValuesIn(Cases()));

/// Every cluster probed and none estimated: exact attention over every token and the extras.
TEST(IvfAttention, EveryClusterProbedIsFullAttention) {
  if (!HasTensorCores()) GTEST_SKIP() << "needs compute capability 7.5";
  for (DType dtype : {DType::kFloat16, DType::kBFloat16}) {
    AttnCase c;
    c.dtype = dtype;
    c.n_probe = c.clusters;
    c.n_estimate = 0;
    c.extra = 7;
    const Data x = Draw(c, 31);
    Indexed s;
    ASSERT_TRUE(Build(c, x, &s));
    std::vector<uint16_t> out;
    std::vector<float> lse;
    ASSERT_TRUE(Attend(c, s, nullptr, &out, &lse));
    // The keys and values of each head followed by its extras: full attention over them.
    const int64_t all = c.seq + c.extra;
    HostArray keys(dtype, c.heads * all * c.dim), values(dtype, c.heads * all * c.value_dim);
    for (int64_t h = 0; h < c.heads; ++h) {
      for (int64_t t = 0; t < all; ++t) {
        for (int64_t e = 0; e < c.dim; ++e)
          keys.set((h * all + t) * c.dim + e,
                   t < c.seq ? x.keys.get((h * c.seq + t) * c.dim + e)
                             : x.extra_keys.get((h * c.extra + t - c.seq) * c.dim + e));
        for (int64_t e = 0; e < c.value_dim; ++e)
          values.set((h * all + t) * c.value_dim + e,
                     t < c.seq ? x.values.get((h * c.seq + t) * c.value_dim + e)
                               : x.extra_values.get((h * c.extra + t - c.seq) * c.value_dim + e));
      }
    }
    std::vector<double> want, want_lse;
    ref::full_attention(keys, values, c.heads, all, c.dim, c.value_dim, x.queries, c.q_heads,
                        c.n_queries, Scale(c), &want, &want_lse);
    EXPECT_TRUE(Near(c, out, lse, want, want_lse, Bound(dtype))) << c;
  }
}

/// Clusters of one token: the estimate of a cluster is its token, so one probe and every other
/// cluster estimated is full attention.
TEST(IvfAttention, EstimateOfOneTokenClustersIsExact) {
  if (!HasTensorCores()) GTEST_SKIP() << "needs compute capability 7.5";
  AttnCase c;
  c.heads = 1;
  c.q_heads = 2;
  c.seq = 256;
  c.clusters = 256;
  c.segments = 1;
  c.n_probe = 1;
  c.n_estimate = 255;
  const Data x = Draw(c, 41);
  Indexed s;
  ASSERT_TRUE(Build(c, x, &s));
  const std::vector<int32_t> sizes =
      Copy<int32_t>(static_cast<const unsigned char*>(s.buffer.get()) + s.layout.sizes, 256);
  const int64_t singletons = std::count(sizes.begin(), sizes.end(), 1);
  ASSERT_EQ(singletons, 256) << "k-means of 256 distinct keys into 256 clusters";
  std::vector<uint16_t> out;
  std::vector<float> lse;
  ASSERT_TRUE(Attend(c, s, nullptr, &out, &lse));
  std::vector<double> want, want_lse;
  ref::full_attention(x.keys, x.values, c.heads, c.seq, c.dim, c.value_dim, x.queries, c.q_heads,
                      c.n_queries, Scale(c), &want, &want_lse);
  EXPECT_TRUE(Near(c, out, lse, want, want_lse, Bound(c.dtype)));
}

/// The same bits on every run, on another stream and replayed from a CUDA graph.
TEST(IvfAttention, DeterministicStreamsAndGraphs) {
  if (!HasTensorCores()) GTEST_SKIP() << "needs compute capability 7.5";
  AttnCase c;
  c.extra = 3;
  const Data x = Draw(c, 51);
  Indexed s;
  ASSERT_TRUE(Build(c, x, &s));
  std::vector<uint16_t> first, again;
  std::vector<float> lse1, lse2;
  ASSERT_TRUE(Attend(c, s, nullptr, &first, &lse1));
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_TRUE(Attend(c, s, stream, &again, &lse2));
  EXPECT_EQ(first, again);
  EXPECT_EQ(std::memcmp(lse1.data(), lse2.data(), lse1.size() * 4), 0);

  // Captured once, replayed twice into a poisoned output.
  const IvfQueries q = QueriesOf(c, s);
  const IvfAttentionParams p = ParamsOf(c);
  const IvfExtra e = ExtraOf(c, s);
  size_t bytes = 0;
  ASSERT_TRUE(ivf_attention_workspace_size(s.index, q, p, e, &bytes).ok());
  const int64_t rows = c.q_heads * c.n_queries;
  DeviceBuffer d_out, d_lse, workspace;
  ASSERT_TRUE(d_out.allocate(rows * c.value_dim * 2).ok());
  ASSERT_TRUE(d_lse.allocate(rows * 4).ok());
  ASSERT_TRUE(workspace.allocate(static_cast<int64_t>(bytes)).ok());
  cudaGraph_t graph = nullptr;
  ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  const Status captured = ivf_attention(s.index, q, p, e, d_out.get(), d_lse.as<float>(),
                                        workspace.get(), bytes, stream);
  ASSERT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess);
  ASSERT_TRUE(captured.ok()) << captured.to_string();
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  for (int replay = 0; replay < 2; ++replay) {
    cudaMemset(d_out.get(), 0xff, static_cast<size_t>(rows * c.value_dim * 2));
    ASSERT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    EXPECT_EQ(Copy<uint16_t>(d_out.get(), rows * c.value_dim), first) << "replay " << replay;
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
}

/// After an extension (new clusters with their mean keys) and after a save and a load (the mean
/// keys computed again), the attention matches the reference; the loaded index gives the same bits.
TEST(IvfAttention, AfterExtendAndLoad) {
  if (!HasTensorCores()) GTEST_SKIP() << "needs compute capability 7.5";
  AttnCase c;
  c.capacity = c.seq + 512;
  c.max_clusters = c.clusters + 16;
  c.extra = 4;
  Data x = Draw(c, 61);
  Indexed s;
  ASSERT_TRUE(Build(c, x, &s));
  // 512 more tokens per head: keys and values drawn as the first ones.
  AttnCase more = c;
  more.seq = 512;
  const Data y = Draw(more, 62);
  DeviceBuffer new_keys = Upload(y.keys), new_values = Upload(y.values);
  IvfInput input;
  input.keys = new_keys.get();
  input.values = new_values.get();
  input.seq = 512;
  IvfExtendParams ext;
  ext.n_clusters = 16;
  size_t bytes = 0;
  ASSERT_TRUE(ivf_extend_workspace_size(s.index, input, ext, &bytes).ok());
  DeviceBuffer workspace;
  ASSERT_TRUE(workspace.allocate(static_cast<int64_t>(bytes)).ok());
  ASSERT_TRUE(ivf_extend(input, ext, &s.index, workspace.get(), bytes, nullptr).ok());
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  ASSERT_EQ(s.index.n_clusters, c.clusters + 16);
  AttnCase after = c;
  after.n_estimate = 40;
  EXPECT_TRUE(CheckAgainstReference(after, s, x)) << "after extend";
  std::vector<uint16_t> before_save;
  std::vector<float> lse_before;
  ASSERT_TRUE(Attend(after, s, nullptr, &before_save, &lse_before));

  char dir[] = "/tmp/cudaops-attention-XXXXXX";
  ASSERT_NE(::mkdtemp(dir), nullptr);
  const std::string path = std::string(dir) + "/index.ivf";
  ASSERT_TRUE(ivf_save(s.index, path.c_str(), nullptr).ok());
  Indexed loaded;
  loaded.index.shape = s.index.shape;
  loaded.layout = s.layout;
  ASSERT_TRUE(loaded.buffer.allocate(static_cast<int64_t>(s.layout.bytes)).ok());
  cudaMemset(loaded.buffer.get(), 0xff, s.layout.bytes);
  loaded.index.data = loaded.buffer.get();
  const Status load = ivf_load(path.c_str(), &loaded.index, nullptr);
  std::remove(path.c_str());
  ::rmdir(dir);
  ASSERT_TRUE(load.ok()) << load.to_string();
  loaded.queries = Upload(x.queries);
  loaded.extra_keys = Upload(x.extra_keys);
  loaded.extra_values = Upload(x.extra_values);
  std::vector<uint16_t> after_load;
  std::vector<float> lse_after;
  ASSERT_TRUE(Attend(after, loaded, nullptr, &after_load, &lse_after));
  EXPECT_EQ(after_load, before_save);
}

/// attention_merge against its reference: every dtype, odd sizes, a part at -inf, offsets.
TEST(AttentionMerge, MatchesReference) {
  for (DType dtype : {DType::kFloat32, DType::kFloat16, DType::kBFloat16}) {
    for (const auto& [parts, rows, dim] :
         {std::tuple<int64_t, int64_t, int64_t>{2, 32, 128}, {1, 7, 64}, {5, 199, 96}, {8, 3, 8}}) {
      harness::CaseConfig config;
      config.dtype = dtype;
      config.dims = {{"parts", parts}, {"rows", rows}, {"dim", dim}};
      config.seed = static_cast<uint64_t>(parts * 131 + rows);
      config.offset = rows % 2;
      EXPECT_TRUE(testing::CheckDescriptorCase("attention_merge", config, nullptr,
                                               std::string(dtype_name(dtype)) + " parts " +
                                                   std::to_string(parts) + " rows " +
                                                   std::to_string(rows)));
    }
  }
}

/// One context in two indexes (its first and second halves, as two ranks would hold it): each
/// attends every cluster of its own, and the two merged by their log-sum-exps are the attention
/// over the whole context.
TEST(IvfAttention, PartsMergeIntoTheWhole) {
  if (!HasTensorCores()) GTEST_SKIP() << "needs compute capability 7.5";
  AttnCase whole;
  whole.seq = 2400;
  whole.extra = 0;
  const Data x = Draw(whole, 71);
  const int64_t half = whole.seq / 2, rows = whole.q_heads * whole.n_queries;
  DeviceBuffer outs, lses;
  ASSERT_TRUE(outs.allocate(2 * rows * whole.value_dim * 2).ok());
  ASSERT_TRUE(lses.allocate(2 * rows * 4).ok());
  for (int part = 0; part < 2; ++part) {
    AttnCase c = whole;
    c.seq = half;
    c.clusters = 32;
    c.n_probe = 32;
    c.n_estimate = 0;
    Data y = x;
    y.keys = HostArray(c.dtype, c.heads * half * c.dim);
    y.values = HostArray(c.dtype, c.heads * half * c.value_dim);
    for (int64_t h = 0; h < c.heads; ++h) {
      for (int64_t t = 0; t < half; ++t) {
        for (int64_t e = 0; e < c.dim; ++e)
          y.keys.set((h * half + t) * c.dim + e,
                     x.keys.get((h * whole.seq + part * half + t) * c.dim + e));
        for (int64_t e = 0; e < c.value_dim; ++e)
          y.values.set((h * half + t) * c.value_dim + e,
                       x.values.get((h * whole.seq + part * half + t) * c.value_dim + e));
      }
    }
    Indexed s;
    ASSERT_TRUE(Build(c, y, &s));
    std::vector<uint16_t> out;
    std::vector<float> lse;
    ASSERT_TRUE(Attend(c, s, nullptr, &out, &lse));
    cudaMemcpy(outs.as<uint16_t>() + part * rows * c.value_dim, out.data(), out.size() * 2,
               cudaMemcpyHostToDevice);
    cudaMemcpy(lses.as<float>() + part * rows, lse.data(), lse.size() * 4, cudaMemcpyHostToDevice);
  }
  DeviceBuffer merged, merged_lse;
  ASSERT_TRUE(merged.allocate(rows * whole.value_dim * 2).ok());
  ASSERT_TRUE(merged_lse.allocate(rows * 4).ok());
  ASSERT_TRUE(attention_merge(outs.get(), lses.as<float>(), merged.get(), merged_lse.as<float>(), 2,
                              rows, whole.value_dim, whole.dtype, nullptr)
                  .ok());
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::vector<double> want, want_lse;
  ref::full_attention(x.keys, x.values, whole.heads, whole.seq, whole.dim, whole.value_dim,
                      x.queries, whole.q_heads, whole.n_queries, Scale(whole), &want, &want_lse);
  // Two roundings of the output (each part's, then the merge's): twice the bound.
  EXPECT_TRUE(Near(whole, Copy<uint16_t>(merged.get(), rows * whole.value_dim),
                   Copy<float>(merged_lse.get(), rows), want, want_lse, 2 * Bound(whole.dtype)));
}

}  // namespace
}  // namespace cudaops
