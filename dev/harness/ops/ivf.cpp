// Descriptors of the IVF index over attention KV caches: ivf_build (keys and values [heads, seq,
// dim] into clusters per head, by segments), ivf_search (queries of q_heads against a built
// index) and ivf_extend (new_tokens more per head, clustered on their own, appended to a built
// index; every timed call appends them at the same place). Keys are drawn on the host around a few
// directions per head with a large common offset, as attention keys are; values are Gaussian;
// queries lie near keys of their kv head.
//
// --check: ivf_build's means against the double-precision ones, and per token that it is placed
// exactly once with its key copied bit for bit, in the cluster of its largest inner product among
// the returned centroids (but at near ties), or with the segments' pass, in one of its segment's;
// ivf_search's scores and ids against the reference's search over the index the device built;
// ivf_extend's new tokens each placed once among the new clusters, their keys copied bit for bit,
// each in the new cluster of its largest inner product (but at near ties).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "cudaops/ivf.h"
#include "harness/device_buffer.h"
#include "harness/key_models.h"
#include "harness/registry.h"
#include "reference/ivf.h"
#include "reference/kmeans.h"

namespace cudaops::harness {
namespace {

/// Most key values drawn on the host; more heads repeat the first ones.
constexpr int64_t kMaxHostValues = int64_t{1} << 24;

IvfShape shape_of(const CaseConfig& config) {
  IvfShape s;
  s.heads = dim_value(config.dims, "heads");
  s.dim = dim_value(config.dims, "dim");
  s.value_dim = dim_value(config.dims, "values", 1) != 0 ? s.dim : 0;
  s.capacity = dim_value(config.dims, "seq");
  s.max_clusters = dim_value(config.dims, "clusters");
  s.dtype = config.dtype;
  return s;
}

IvfBuildParams build_params_of(const CaseConfig& config) {
  IvfBuildParams p;
  p.n_clusters = dim_value(config.dims, "clusters");
  p.n_segments = dim_value(config.dims, "segments", 1);
  p.n_iters = static_cast<int>(dim_value(config.dims, "n_iters", 10));
  const int64_t pass = dim_value(config.dims, "pass", 0);
  p.global_pass = pass != 1;
  p.prune = pass == 0;
  return p;
}

/// The index a case's query ops run on, as its sizes say (no buffer): for their size queries.
IvfIndex held_of(const CaseConfig& config) {
  IvfIndex index;
  index.shape = shape_of(config);
  index.tokens = dim_value(config.dims, "seq");
  index.n_clusters = build_params_of(config).n_clusters;
  return index;
}

/// The query rows of a case (no data).
IvfQueries queries_of(const CaseConfig& config) {
  IvfQueries queries;
  queries.q_heads = dim_value(config.dims, "q_heads");
  queries.n_queries = dim_value(config.dims, "queries", 1);
  return queries;
}

IvfAttentionParams attention_params_of(const CaseConfig& config) {
  IvfAttentionParams params;
  params.n_probe = dim_value(config.dims, "n_probe");
  params.n_estimate = dim_value(config.dims, "n_estimate", 0);
  params.group = dim_value(config.dims, "group", 1) != 0;
  return params;
}

IvfExtra extra_of(const CaseConfig& config) {
  IvfExtra extra;
  extra.tokens = dim_value(config.dims, "extra", 0);
  return extra;
}

/// An index built on the device from host-drawn keys, with what the checks need.
class DeviceIndex {
 public:
  /// Room for `tokens` more tokens and `clusters` more clusters per head than the build holds;
  /// the keys and values of those tokens are drawn with the rest (new_input). Before prepare.
  void reserve(int64_t tokens, int64_t clusters) {
    extra_tokens_ = tokens;
    extra_clusters_ = clusters;
  }

  Status prepare(const CaseConfig& config) {
    config_ = config;
    index_.shape = shape_of(config);
    index_.shape.capacity += extra_tokens_;
    index_.shape.max_clusters += extra_clusters_;
    params_ = build_params_of(config);
    input_.seq = dim_value(config.dims, "seq");
    total_ = input_.seq + extra_tokens_;
    const IvfShape& s = index_.shape;
    if (Status st = ivf_index_size(s, &layout_); !st.ok()) return st;
    size_t bytes = 0;
    if (Status st = ivf_build_workspace_size(s, input_, params_, &bytes); !st.ok()) return st;
    const int64_t per_head = total_ * s.dim;
    unique_ = std::max<int64_t>(1, std::min<int64_t>(s.heads, kMaxHostValues / per_head));
    keys_ = ref::HostArray(s.dtype, unique_ * per_head);
    values_ = ref::HostArray(s.dtype, std::max<int64_t>(unique_ * total_ * s.value_dim, 1));
    draw();
    const int64_t key_row = s.dim * 2, value_row = s.value_dim * 2;
    Status st = d_keys_.allocate(std::max<int64_t>(s.heads * input_.seq * key_row, 1));
    if (st.ok()) st = upload(keys_, &d_keys_, key_row, 0, input_.seq);
    if (st.ok() && s.value_dim > 0) {
      st = d_values_.allocate(std::max<int64_t>(s.heads * input_.seq * value_row, 1));
      if (st.ok()) st = upload(values_, &d_values_, value_row, 0, input_.seq);
    }
    if (st.ok() && extra_tokens_ > 0) {
      st = d_new_keys_.allocate(s.heads * extra_tokens_ * key_row);
      if (st.ok()) st = upload(keys_, &d_new_keys_, key_row, input_.seq, extra_tokens_);
      if (st.ok() && s.value_dim > 0) {
        st = d_new_values_.allocate(s.heads * extra_tokens_ * value_row);
        if (st.ok()) st = upload(values_, &d_new_values_, value_row, input_.seq, extra_tokens_);
      }
    }
    if (st.ok()) st = buffer_.allocate(static_cast<int64_t>(layout_.bytes));
    if (st.ok()) st = workspace_.allocate(static_cast<int64_t>(std::max<size_t>(bytes, 256)));
    workspace_bytes_ = bytes;
    index_.data = buffer_.get();
    input_.keys = d_keys_.get();
    input_.values = s.value_dim > 0 ? d_values_.get() : nullptr;
    return st;
  }

  /// The reserved tokens' keys and values ([heads, tokens, dim]) as an input.
  IvfInput new_input() const {
    IvfInput in;
    in.keys = d_new_keys_.get();
    in.values = index_.shape.value_dim > 0 ? d_new_values_.get() : nullptr;
    in.seq = extra_tokens_;
    return in;
  }

  Status build(cudaStream_t stream) {
    return ivf_build(input_, params_, &index_, workspace_.get(), workspace_bytes_, stream);
  }

  /// The index's state as the reference's index (heads, tokens and clusters as built), with the
  /// float32 centroids, or with `scanned` the 16-bit ones the search ranks clusters by.
  ref::IvfIndexReference state(bool scanned = false) const {
    const IvfShape& s = index_.shape;
    const int64_t h = s.heads, cm = s.max_clusters, n = s.capacity, c = params_.n_clusters;
    const auto means = download<float>(layout_.means, h * s.dim);
    std::vector<double> centroids(static_cast<size_t>(h * cm * s.dim));
    if (scanned) {
      const auto bits = download<uint16_t>(layout_.centroids_lp, h * cm * s.dim);
      ref::HostArray lp(s.dtype, h * cm * s.dim);
      std::memcpy(lp.data(), bits.data(), bits.size() * sizeof(uint16_t));
      for (int64_t i = 0; i < h * cm * s.dim; ++i)
        centroids[static_cast<size_t>(i)] = lp.get(i);
    } else {
      const auto f = download<float>(layout_.centroids, h * cm * s.dim);
      std::copy(f.begin(), f.end(), centroids.begin());
    }
    const auto offsets = download<int64_t>(layout_.offsets, h * (cm + 1));
    const auto ids = download<int32_t>(layout_.ids, h * n);
    ref::IvfIndexReference st;
    st.shape.heads = h;
    st.shape.seq = n;
    st.shape.dim = s.dim;
    st.shape.clusters = c;
    st.shape.segments = params_.n_segments;
    st.means.assign(means.begin(), means.end());
    st.centroids.resize(static_cast<size_t>(h * c * s.dim));
    st.offsets.resize(static_cast<size_t>(h * (c + 1)));
    st.ids.assign(static_cast<size_t>(h * n), -1);
    st.labels.assign(static_cast<size_t>(h * n), -1);
    for (int64_t hh = 0; hh < h; ++hh) {
      std::copy(centroids.begin() + hh * cm * s.dim, centroids.begin() + (hh * cm + c) * s.dim,
                st.centroids.begin() + hh * c * s.dim);
      for (int64_t j = 0; j <= c; ++j)
        st.offsets[hh * (c + 1) + j] = offsets[hh * (cm + 1) + j];
      for (int64_t p = 0; p < n; ++p)
        st.ids[hh * n + p] = ids[hh * n + p];
      for (int64_t j = 0; j < c; ++j) {
        for (int64_t p = offsets[hh * (cm + 1) + j]; p < offsets[hh * (cm + 1) + j + 1]; ++p) {
          const int64_t t = ids[hh * n + p];
          if (p >= 0 && p < n && t >= 0 && t < n) st.labels[hh * n + t] = static_cast<int32_t>(j);
        }
      }
    }
    return st;
  }

  /// What the decode attention reads of the index, downloaded (heads, tokens and clusters held).
  ref::IvfAttentionIndex attention_state() const {
    const IvfShape& s = index_.shape;
    const int64_t h = s.heads, cm = s.max_clusters, n = index_.tokens, c = index_.n_clusters;
    const int64_t cap = s.capacity, d = s.dim, dv = s.value_dim;
    ref::IvfAttentionIndex x;
    x.heads = h;
    x.tokens = n;
    x.clusters = c;
    x.dim = d;
    x.value_dim = dv;
    const auto offsets = download<int64_t>(layout_.offsets, h * (cm + 1));
    const auto keys = download<uint16_t>(layout_.keys, h * cap * d);
    const auto values = download<uint16_t>(layout_.values, h * cap * dv);
    const auto means = download<uint16_t>(layout_.key_means, h * cm * d);
    const auto sums = download<float>(layout_.value_sums, h * cm * dv);
    x.offsets.resize(static_cast<size_t>(h * (c + 1)));
    x.keys = ref::HostArray(s.dtype, std::max<int64_t>(h * n * d, 1));
    x.values = ref::HostArray(s.dtype, std::max<int64_t>(h * n * dv, 1));
    x.key_means = ref::HostArray(s.dtype, std::max<int64_t>(h * c * d, 1));
    x.value_sums.resize(static_cast<size_t>(h * c * dv));
    auto* k = static_cast<uint16_t*>(x.keys.data());
    auto* v = static_cast<uint16_t*>(x.values.data());
    auto* m = static_cast<uint16_t*>(x.key_means.data());
    for (int64_t hh = 0; hh < h; ++hh) {
      for (int64_t j = 0; j <= c; ++j)
        x.offsets[hh * (c + 1) + j] = offsets[hh * (cm + 1) + j];
      std::copy_n(keys.begin() + hh * cap * d, n * d, k + hh * n * d);
      std::copy_n(values.begin() + hh * cap * dv, n * dv, v + hh * n * dv);
      std::copy_n(means.begin() + hh * cm * d, c * d, m + hh * c * d);
      std::copy_n(sums.begin() + hh * cm * dv, c * dv, x.value_sums.begin() + hh * c * dv);
    }
    return x;
  }

  template <typename P>
  std::vector<P> download(size_t offset, int64_t count) const {
    std::vector<P> host(static_cast<size_t>(count));
    if (cudaMemcpy(host.data(), static_cast<const unsigned char*>(buffer_.get()) + offset,
                   host.size() * sizeof(P), cudaMemcpyDeviceToHost) != cudaSuccess) {
      std::fill(host.begin(), host.end(), P{});
    }
    return host;
  }

  /// Whether `op`'s --check can run: every head's keys drawn, none a copy of another's.
  Status checkable(const char* op) const {
    if (unique_ == index_.shape.heads) return Status();
    return Status(
        StatusCode::kNotSupported,
        std::string(op) + ": --check takes at most 2^24 key values (fewer heads or tokens)");
  }

  /// The index poisoned (every byte 0xff) and built again on `stream`, so that a check reads only
  /// what the build (and whatever follows it) writes.
  Status rebuild_poisoned(const char* op, cudaStream_t stream) {
    if (cudaMemsetAsync(index_.data, 0xff, layout_.bytes, stream) != cudaSuccess) {
      return Status(StatusCode::kCudaError, std::string(op) + ": poisoning the index failed");
    }
    return build(stream);
  }
  /// Tokens drawn per head: the build's, then the reserved ones.
  int64_t drawn_tokens() const { return total_; }
  const IvfIndex& index() const { return index_; }
  const IvfLayout& layout() const { return layout_; }
  const IvfBuildParams& params() const { return params_; }
  const ref::HostArray& keys() const { return keys_; }
  const ref::HostArray& values() const { return values_; }
  int64_t workspace_bytes() const { return static_cast<int64_t>(workspace_bytes_); }

 private:
  void draw() {
    const IvfShape& s = index_.shape;
    const auto model = static_cast<KeyModel>(dim_value(config_.dims, "keys_model", 0));
    if (model != KeyModel::kMix8) {
      draw_keys(model, config_.seed, unique_, total_, s.dim, &keys_);
      std::mt19937_64 rng(config_.seed * 104729 + 5);
      std::normal_distribution<double> normal(0.0, 1.0);
      for (int64_t i = 0; i < unique_ * total_ * s.value_dim; ++i)
        values_.set(i, normal(rng));
      return;
    }
    std::mt19937_64 rng(config_.seed * 104729 + 3);
    std::normal_distribution<double> normal(0.0, 1.0);
    std::vector<double> offset(static_cast<size_t>(s.dim)), dirs(static_cast<size_t>(8 * s.dim));
    for (int64_t h = 0; h < unique_; ++h) {
      for (double& v : offset)
        v = 2.0 + 0.5 * normal(rng);
      for (double& v : dirs)
        v = normal(rng);
      for (int64_t t = 0; t < total_; ++t) {
        const auto which = static_cast<int64_t>(rng() % 8);
        for (int64_t e = 0; e < s.dim; ++e) {
          keys_.set((h * total_ + t) * s.dim + e,
                    offset[e] + dirs[which * s.dim + e] + 0.3 * normal(rng));
        }
      }
    }
    for (int64_t i = 0; i < unique_ * total_ * s.value_dim; ++i)
      values_.set(i, normal(rng));
  }

  /// Tokens [first, first + count) of every head ([heads, count] rows of row_bytes on the
  /// device): the first unique_ heads drawn, then copies of them.
  Status upload(const ref::HostArray& host, DeviceBuffer* device, int64_t row_bytes, int64_t first,
                int64_t count) const {
    if (count == 0) return Status();
    const int64_t heads = index_.shape.heads, bytes = count * row_bytes;
    for (int64_t h = 0; h < heads; ++h) {
      const auto* src = static_cast<const unsigned char*>(host.data()) +
                        ((h % unique_) * total_ + first) * row_bytes;
      if (cudaMemcpy(device->as<unsigned char>() + h * bytes, src, static_cast<size_t>(bytes),
                     cudaMemcpyHostToDevice) != cudaSuccess) {
        return Status(StatusCode::kCudaError, "ivf: uploading the keys or values failed");
      }
    }
    return Status();
  }

  CaseConfig config_;
  IvfIndex index_;
  IvfLayout layout_;
  IvfInput input_;
  IvfBuildParams params_;
  int64_t unique_ = 1;
  int64_t extra_tokens_ = 0, extra_clusters_ = 0, total_ = 0;
  ref::HostArray keys_, values_;
  DeviceBuffer d_keys_, d_values_, d_new_keys_, d_new_values_, buffer_, workspace_;
  size_t workspace_bytes_ = 0;
};

/// Each of the n keys (n x d values of dtype, 16-bit) of one head assigned to the nearest of the
/// m centroids (cosine, centred by `mean`), in double precision.
ref::KmeansReference nearest_centroids(DType dtype, const unsigned char* keys, int64_t n, int64_t d,
                                       const std::vector<double>& centroids, int64_t m,
                                       const std::vector<double>& mean) {
  ref::KmeansLayout one;
  one.n = n;
  one.d = d;
  one.ld = d;
  one.batch_stride = n * d;
  ref::HostArray head(dtype, n * d);
  std::memcpy(head.data(), keys, static_cast<size_t>(n * d * 2));
  return ref::kmeans_assign(head, one, centroids, m, mean, KmeansMetric::kCosine);
}

/// Whether `label` is key t's nearest centroid (nearest_centroids), or another within what the
/// 16-bit products' rounding can turn (32 units of dtype's precision of the margin).
bool nearest_or_tied(const ref::KmeansReference& nearest, int64_t t, int64_t label, DType dtype) {
  const double eps = dtype == DType::kBFloat16 ? 0x1p-8 : 0x1p-11;
  return label == nearest.labels[t] || nearest.margins[t] <= 32 * eps;
}

class IvfBuildCase : public OpCase {
 public:
  explicit IvfBuildCase(const CaseConfig& config) : config_(config) {}
  Status prepare() { return index_.prepare(config_); }

  /// The keys and values read once by the copies, the keys 2 n_iters + 3 times by k-means and the
  /// global pass, the index written once.
  int64_t bytes_moved() const override {
    const IvfShape& s = index_.index().shape;
    const int64_t keys = s.heads * s.capacity * s.dim * 2;
    const int64_t values = s.heads * s.capacity * s.value_dim * 2;
    return keys * (2 * index_.params().n_iters + 5) + 2 * values;
  }

  /// The products of k-means (each segment against its clusters, n_iters + 1 times) and of the
  /// global pass (every token against all of its head's clusters).
  double flops() const override {
    const IvfShape& s = index_.index().shape;
    const IvfBuildParams& p = index_.params();
    const double tokens = static_cast<double>(s.heads) * static_cast<double>(s.capacity);
    const int64_t per_segment = p.n_clusters / p.n_segments;  // a whole number: checked
    const double per = static_cast<double>(per_segment);
    double f = 2.0 * tokens * per * static_cast<double>(s.dim) * (p.n_iters + 1);
    if (p.global_pass) {
      f += 2.0 * tokens * static_cast<double>(p.n_clusters) * static_cast<double>(s.dim);
    }
    return f;
  }

  Status run(cudaStream_t stream) override { return index_.build(stream); }

  Status check(cudaStream_t stream, ref::CompareResult* result) override {
    if (Status s = index_.checkable("ivf_build"); !s.ok()) return s;
    if (Status s = index_.rebuild_poisoned("ivf_build", stream); !s.ok()) return s;
    if (cudaStreamSynchronize(stream) != cudaSuccess) {
      return Status(StatusCode::kCudaError, "ivf_build: the build failed");
    }
    const IvfShape& sh = index_.index().shape;
    const IvfBuildParams& p = index_.params();
    const int64_t h = sh.heads, n = sh.capacity, d = sh.dim, c = p.n_clusters;
    const ref::IvfIndexReference st = index_.state();
    const auto keys_out = index_.download<unsigned char>(index_.layout().keys, h * n * d * 2);
    ref::HostArray got(DType::kFloat32, h * d + h * n);
    std::vector<double> want(static_cast<size_t>(got.size()));
    int64_t at = 0;
    const auto* keys = static_cast<const unsigned char*>(index_.keys().data());
    for (int64_t hh = 0; hh < h; ++hh) {
      // The head's mean, in double.
      for (int64_t e = 0; e < d; ++e) {
        double m = 0;
        for (int64_t t = 0; t < n; ++t)
          m += index_.keys().get((hh * n + t) * d + e);
        got.set(at, st.means[hh * d + e]);
        want[at++] = m / static_cast<double>(n);
      }
      // Each token: placed once (its place's key its own), in the right cluster.
      std::vector<int> seen(static_cast<size_t>(n), 0);
      for (int64_t q = 0; q < n; ++q) {
        const int64_t t = st.ids[hh * n + q];
        if (t >= 0 && t < n &&
            std::memcmp(&keys_out[(hh * n + q) * d * 2], keys + (hh * n + t) * d * 2,
                        static_cast<size_t>(d * 2)) == 0) {
          ++seen[t];
        }
      }
      const ref::KmeansReference nearest = nearest_centroids(
          sh.dtype, keys + hh * n * d * 2, n, d,
          {st.centroids.begin() + hh * c * d, st.centroids.begin() + (hh + 1) * c * d}, c,
          {st.means.begin() + hh * d, st.means.begin() + (hh + 1) * d});
      const int64_t per = c / p.n_segments;
      for (int64_t t = 0; t < n; ++t) {
        const int32_t label = st.labels[hh * n + t];
        bool right = seen[t] == 1 && label >= 0;
        if (right && p.global_pass) {
          right = nearest_or_tied(nearest, t, label, sh.dtype);
        } else if (right) {
          int64_t g = 0, begin = 0, end = 0;
          for (; g < p.n_segments; ++g) {
            ref::ivf_segment(n, p.n_segments, g, &begin, &end);
            if (t < end) break;
          }
          right = label >= g * per && label < (g + 1) * per;
        }
        got.set(at, right ? 1.0 : 0.0);
        want[at++] = 1.0;
      }
    }
    *result = ref::compare(got, want, ref::Tolerance{1e-4, 1.0});
    return Status();
  }

 private:
  CaseConfig config_;
  DeviceIndex index_;
};

/// Queries [q_heads, n_queries, dim] near random keys of their kv heads (noise 0.3).
ref::HostArray index_queries(const DeviceIndex& index, int64_t q_heads, int64_t n_queries,
                             uint64_t seed, KeyModel model) {
  const IvfShape& s = index.index().shape;
  const int64_t rows = q_heads * n_queries;
  ref::HostArray out(s.dtype, std::max<int64_t>(rows * s.dim, 1));
  if (model != KeyModel::kMix8) {
    // The model's queries for the drawn heads; a head that repeats a drawn one takes its queries.
    const int64_t tokens = index.drawn_tokens(), group = q_heads / s.heads;
    const int64_t unique = std::max<int64_t>(1, index.keys().size() / (tokens * s.dim));
    ref::HostArray drawn(s.dtype, unique * group * n_queries * s.dim);
    draw_queries(model, seed, index.keys(), unique, tokens, s.dim, unique * group, n_queries,
                 &drawn);
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t g = r / n_queries, q = r % n_queries;
      const int64_t from = (((g / group) % unique) * group + g % group) * n_queries + q;
      for (int64_t e = 0; e < s.dim; ++e)
        out.set(r * s.dim + e, drawn.get(from * s.dim + e));
    }
    return out;
  }
  std::mt19937_64 rng(seed * 7 + 1);
  std::normal_distribution<double> normal(0.0, 0.3);
  const int64_t group = q_heads / s.heads;
  const int64_t tokens = index.drawn_tokens();
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t h = (r / std::max<int64_t>(n_queries, 1)) / group;
    const int64_t t = static_cast<int64_t>(rng() % static_cast<uint64_t>(tokens));
    const int64_t drawn = h % std::max<int64_t>(1, index.keys().size() / (tokens * s.dim));
    for (int64_t e = 0; e < s.dim; ++e)
      out.set(r * s.dim + e, index.keys().get((drawn * tokens + t) * s.dim + e) + normal(rng));
  }
  return out;
}

class IvfSearchCase : public OpCase {
 public:
  explicit IvfSearchCase(const CaseConfig& config) : config_(config) {}

  Status prepare() {
    if (Status s = index_.prepare(config_); !s.ok()) return s;
    if (Status s = index_.build(nullptr); !s.ok()) return s;
    if (cudaDeviceSynchronize() != cudaSuccess) {
      return Status(StatusCode::kCudaError, "ivf_search: building the index failed");
    }
    queries_ = queries_of(config_);
    params_.k = dim_value(config_.dims, "k");
    params_.n_probe = dim_value(config_.dims, "n_probe");
    params_.max_candidates = dim_value(config_.dims, "max_candidates", 0);
    size_t bytes = 0;
    if (Status st = ivf_search_workspace_size(index_.index(), queries_, params_, &bytes);
        !st.ok()) {
      return st;
    }
    const int64_t rows = queries_.q_heads * queries_.n_queries;
    host_queries_ = index_queries(index_, queries_.q_heads, queries_.n_queries, config_.seed,
                                  static_cast<KeyModel>(dim_value(config_.dims, "keys_model", 0)));
    Status st = d_queries_.allocate(host_queries_.size_bytes());
    if (st.ok() && cudaMemcpy(d_queries_.get(), host_queries_.data(),
                              static_cast<size_t>(host_queries_.size_bytes()),
                              cudaMemcpyHostToDevice) != cudaSuccess) {
      st = Status(StatusCode::kCudaError, "ivf_search: uploading the queries failed");
    }
    if (st.ok()) st = scores_.allocate(std::max<int64_t>(rows * params_.k, 1) * 4);
    if (st.ok()) st = ids_.allocate(std::max<int64_t>(rows * params_.k, 1) * 8);
    if (st.ok()) st = workspace_.allocate(static_cast<int64_t>(std::max<size_t>(bytes, 256)));
    workspace_bytes_ = bytes;
    queries_.data = d_queries_.get();
    return st;
  }

  /// The centroids scanned (16-bit), the probed clusters' keys (at the mean cluster size) read
  /// once per query row, the results written.
  int64_t bytes_moved() const override {
    const IvfShape& s = index_.index().shape;
    const int64_t rows = queries_.q_heads * queries_.n_queries;
    const int64_t per_cluster = s.capacity / std::max<int64_t>(index_.params().n_clusters, 1);
    return s.heads * index_.params().n_clusters * s.dim * 2 +
           rows * (params_.n_probe * per_cluster * s.dim * 2 + params_.k * 12);
  }

  Status run(cudaStream_t stream) override {
    return ivf_search(index_.index(), queries_, params_, scores_.as<float>(), ids_.as<int64_t>(),
                      workspace_.get(), workspace_bytes_, stream);
  }

  Status check(cudaStream_t stream, ref::CompareResult* result) override {
    if (Status s = index_.checkable("ivf_search"); !s.ok()) return s;
    const int64_t rows = queries_.q_heads * queries_.n_queries, results = rows * params_.k;
    if (cudaMemsetAsync(scores_.get(), 0xff, static_cast<size_t>(results * 4), stream) !=
            cudaSuccess ||
        cudaMemsetAsync(ids_.get(), 0x7f, static_cast<size_t>(results * 8), stream) !=
            cudaSuccess) {
      return Status(StatusCode::kCudaError, "ivf_search: poisoning the results failed");
    }
    if (Status s = run(stream); !s.ok()) return s;
    std::vector<float> scores(static_cast<size_t>(results));
    std::vector<int64_t> ids(static_cast<size_t>(results));
    if (cudaStreamSynchronize(stream) != cudaSuccess ||
        cudaMemcpy(scores.data(), scores_.get(), scores.size() * 4, cudaMemcpyDeviceToHost) !=
            cudaSuccess ||
        cudaMemcpy(ids.data(), ids_.get(), ids.size() * 8, cudaMemcpyDeviceToHost) != cudaSuccess) {
      return Status(StatusCode::kCudaError, "ivf_search: the search failed");
    }
    const ref::IvfSearchReference want =
        ref::ivf_search(index_.state(true), index_.keys(), host_queries_, queries_.q_heads,
                        queries_.n_queries, params_.k, params_.n_probe);
    // Scores against the reference's; an id where the score is not within reach of another.
    ref::HostArray got(DType::kFloat32, 2 * results);
    std::vector<double> expected(static_cast<size_t>(2 * results));
    const double tol = 1e-5 * static_cast<double>(index_.index().shape.dim);
    for (int64_t i = 0; i < results; ++i) {
      const double w = want.scores[i];
      got.set(i, scores[i]);
      expected[i] = w;
      bool right = ids[i] == want.ids[i];
      for (int64_t j = (i / params_.k) * params_.k; !right && j < (i / params_.k + 1) * params_.k;
           ++j) {
        right = j != i && std::abs(want.scores[j] - w) <= 2 * tol * (1 + std::abs(w));
      }
      got.set(results + i, right ? 1.0 : 0.0);
      expected[results + i] = 1.0;
    }
    *result = ref::compare(got, expected, ref::Tolerance{tol, 1.0});
    return Status();
  }

 private:
  CaseConfig config_;
  DeviceIndex index_;
  IvfQueries queries_;
  IvfSearchParams params_;
  ref::HostArray host_queries_;
  DeviceBuffer d_queries_, scores_, ids_, workspace_;
  size_t workspace_bytes_ = 0;
};

/// ivf_attention: the decode step over an index built from the bench's keys, queries near them,
/// `extra` tokens per kv head more (copies of random keys with noise), zones by `group`.
class IvfAttentionCase : public OpCase {
 public:
  explicit IvfAttentionCase(const CaseConfig& config) : config_(config) {}

  Status prepare() {
    if (Status s = index_.prepare(config_); !s.ok()) return s;
    if (Status s = index_.build(nullptr); !s.ok()) return s;
    if (cudaDeviceSynchronize() != cudaSuccess) {
      return Status(StatusCode::kCudaError, "ivf_attention: building the index failed");
    }
    const IvfShape& s = index_.index().shape;
    queries_ = queries_of(config_);
    params_ = attention_params_of(config_);
    extra_ = extra_of(config_);
    size_t bytes = 0;
    if (Status st = ivf_attention_workspace_size(index_.index(), queries_, params_, extra_, &bytes);
        !st.ok()) {
      return st;
    }
    const int64_t rows = queries_.q_heads * queries_.n_queries;
    host_queries_ = index_queries(index_, queries_.q_heads, queries_.n_queries, config_.seed,
                                  static_cast<KeyModel>(dim_value(config_.dims, "keys_model", 0)));
    // The extras: keys near random keys of their head, Gaussian values.
    const int64_t x = extra_.tokens;
    host_extra_keys_ = ref::HostArray(s.dtype, std::max<int64_t>(s.heads * x * s.dim, 1));
    host_extra_values_ = ref::HostArray(s.dtype, std::max<int64_t>(s.heads * x * s.value_dim, 1));
    {
      std::mt19937_64 rng(config_.seed * 11 + 5);
      std::normal_distribution<double> normal(0.0, 1.0);
      const int64_t tokens = index_.drawn_tokens();
      const int64_t unique = std::max<int64_t>(1, index_.keys().size() / (tokens * s.dim));
      for (int64_t h = 0; h < s.heads; ++h) {
        for (int64_t t = 0; t < x; ++t) {
          const int64_t src = static_cast<int64_t>(rng() % static_cast<uint64_t>(tokens));
          for (int64_t e = 0; e < s.dim; ++e) {
            host_extra_keys_.set(
                (h * x + t) * s.dim + e,
                index_.keys().get(((h % unique) * tokens + src) * s.dim + e) + 0.3 * normal(rng));
          }
          for (int64_t e = 0; e < s.value_dim; ++e)
            host_extra_values_.set((h * x + t) * s.value_dim + e, normal(rng));
        }
      }
    }
    Status st = upload(host_queries_, &d_queries_);
    if (st.ok()) st = upload(host_extra_keys_, &d_extra_keys_);
    if (st.ok()) st = upload(host_extra_values_, &d_extra_values_);
    if (st.ok()) st = out_.allocate(std::max<int64_t>(rows * s.value_dim * 2, 256));
    if (st.ok()) st = lse_.allocate(std::max<int64_t>(rows * 4, 256));
    if (st.ok()) st = workspace_.allocate(static_cast<int64_t>(std::max<size_t>(bytes, 256)));
    workspace_bytes_ = bytes;
    queries_.data = d_queries_.get();
    extra_.keys = x > 0 ? d_extra_keys_.get() : nullptr;
    extra_.values = x > 0 ? d_extra_values_.get() : nullptr;
    return st;
  }

  /// The centroids scanned (16-bit), the exact zone's keys and values (at the mean cluster size)
  /// and the estimated clusters' mean keys and value sums read once per row, the extras once per
  /// kv head and query, the output written.
  int64_t bytes_moved() const override {
    const IvfShape& s = index_.index().shape;
    const int64_t rows =
        params_.group ? s.heads * queries_.n_queries : queries_.q_heads * queries_.n_queries;
    const int64_t per_cluster = s.capacity / std::max<int64_t>(index_.params().n_clusters, 1);
    return s.heads * index_.params().n_clusters * s.dim * 2 +
           rows * (params_.n_probe * per_cluster * (s.dim + s.value_dim) * 2 +
                   params_.n_estimate * (s.dim * 2 + s.value_dim * 4) +
                   extra_.tokens * (s.dim + s.value_dim) * 2) +
           queries_.q_heads * queries_.n_queries * (s.value_dim * 2 + 4);
  }

  Status run(cudaStream_t stream) override {
    return ivf_attention(index_.index(), queries_, params_, extra_, out_.get(), lse_.as<float>(),
                         workspace_.get(), workspace_bytes_, stream);
  }

  Status check(cudaStream_t stream, ref::CompareResult* result) override {
    if (Status s = index_.checkable("ivf_attention"); !s.ok()) return s;
    const IvfShape& s = index_.index().shape;
    const int64_t rows = queries_.q_heads * queries_.n_queries;
    if (cudaMemsetAsync(out_.get(), 0xff, static_cast<size_t>(rows * s.value_dim * 2), stream) !=
            cudaSuccess ||
        cudaMemsetAsync(lse_.get(), 0xff, static_cast<size_t>(rows * 4), stream) != cudaSuccess) {
      return Status(StatusCode::kCudaError, "ivf_attention: poisoning the results failed");
    }
    if (Status st = run(stream); !st.ok()) return st;
    ref::HostArray got(s.dtype, rows * s.value_dim);
    std::vector<float> lse(static_cast<size_t>(rows));
    if (cudaStreamSynchronize(stream) != cudaSuccess ||
        cudaMemcpy(got.data(), out_.get(), static_cast<size_t>(got.size_bytes()),
                   cudaMemcpyDeviceToHost) != cudaSuccess ||
        cudaMemcpy(lse.data(), lse_.get(), lse.size() * 4, cudaMemcpyDeviceToHost) != cudaSuccess) {
      return Status(StatusCode::kCudaError, "ivf_attention: the attention failed");
    }
    // The zones as the device ranks them (ivf_clusters runs the same ranking and selection).
    ref::IvfAttentionZones zones;
    if (Status st = device_zones(params_.n_probe, &zones.exact); !st.ok()) return st;
    zones.n_exact = params_.n_probe;
    if (params_.n_estimate > 0) {
      if (Status st = device_zones(params_.n_probe + params_.n_estimate, &zones.wide); !st.ok()) {
        return st;
      }
      zones.n_wide = params_.n_probe + params_.n_estimate;
    }
    std::vector<double> want, want_lse;
    const double scale = 1.0 / std::sqrt(static_cast<double>(s.dim));
    ref::ivf_attention(index_.attention_state(), host_queries_, queries_.q_heads,
                       queries_.n_queries, zones, params_.group, host_extra_keys_,
                       host_extra_values_, extra_.tokens, scale, &want, &want_lse);
    // Relative L2 error of each output row, and of each log-sum-exp: within the dtype's bound
    // (bfloat16: two of its units, 2^-9 each: the output's rounding alone can take one).
    const double bound = s.dtype == DType::kBFloat16 ? 4e-3 : 1e-3;
    ref::HostArray errors(DType::kFloat32, 2 * rows);
    std::vector<double> zeros(static_cast<size_t>(2 * rows), 0.0);
    for (int64_t r = 0; r < rows; ++r) {
      double num = 0.0, den = 0.0;
      for (int64_t e = 0; e < s.value_dim; ++e) {
        const double w = want[static_cast<size_t>(r * s.value_dim + e)];
        const double g = got.get(r * s.value_dim + e);
        num += (g - w) * (g - w);
        den += w * w;
      }
      errors.set(r, std::sqrt(num / std::max(den, 1e-30)));
      const double wl = want_lse[static_cast<size_t>(r)];
      errors.set(rows + r,
                 std::abs(lse[static_cast<size_t>(r)] - wl) / std::max(std::abs(wl), 1.0));
    }
    *result = ref::compare(errors, zeros, ref::Tolerance{1.0, bound});
    return Status();
  }

 private:
  /// Each row's n best clusters by the attention's ranking, from the device.
  Status device_zones(int64_t n, std::vector<int32_t>* out) {
    IvfProbeParams probe;
    probe.n_probe = n;
    probe.group = params_.group;
    size_t bytes = 0;
    if (Status st = ivf_clusters_workspace_size(index_.index(), queries_, probe, &bytes);
        !st.ok()) {
      return st;
    }
    const int64_t rows =
        (params_.group ? index_.index().shape.heads : queries_.q_heads) * queries_.n_queries;
    DeviceBuffer clusters, ws;
    Status st = clusters.allocate(std::max<int64_t>(rows * n * 4, 256));
    if (st.ok()) st = ws.allocate(static_cast<int64_t>(std::max<size_t>(bytes, 256)));
    if (st.ok()) {
      st = ivf_clusters(index_.index(), queries_, probe, clusters.as<int32_t>(), ws.get(), bytes,
                        nullptr);
    }
    if (!st.ok()) return st;
    out->assign(static_cast<size_t>(rows * n), -1);
    if (cudaMemcpy(out->data(), clusters.get(), out->size() * 4, cudaMemcpyDeviceToHost) !=
        cudaSuccess) {
      return Status(StatusCode::kCudaError, "ivf_attention: ivf_clusters failed");
    }
    return Status();
  }

  static Status upload(const ref::HostArray& host, DeviceBuffer* device) {
    Status st = device->allocate(std::max<int64_t>(host.size_bytes(), 256));
    if (st.ok() && cudaMemcpy(device->get(), host.data(), static_cast<size_t>(host.size_bytes()),
                              cudaMemcpyHostToDevice) != cudaSuccess) {
      st = Status(StatusCode::kCudaError, "ivf_attention: uploading the inputs failed");
    }
    return st;
  }

  CaseConfig config_;
  DeviceIndex index_;
  IvfQueries queries_;
  IvfAttentionParams params_;
  IvfExtra extra_;
  ref::HostArray host_queries_, host_extra_keys_, host_extra_values_;
  DeviceBuffer d_queries_, d_extra_keys_, d_extra_values_, out_, lse_, workspace_;
  size_t workspace_bytes_ = 0;
};

class IvfExtendCase : public OpCase {
 public:
  explicit IvfExtendCase(const CaseConfig& config) : config_(config) {}

  Status prepare() {
    params_.n_clusters = dim_value(config_.dims, "new_clusters");
    params_.n_iters = static_cast<int>(dim_value(config_.dims, "n_iters", 10));
    index_.reserve(dim_value(config_.dims, "new_tokens"), params_.n_clusters);
    if (Status s = index_.prepare(config_); !s.ok()) return s;
    if (Status s = index_.build(nullptr); !s.ok()) return s;
    if (cudaDeviceSynchronize() != cudaSuccess) {
      return Status(StatusCode::kCudaError, "ivf_extend: building the index failed");
    }
    built_ = index_.index();
    input_ = index_.new_input();
    size_t bytes = 0;
    if (Status s = ivf_extend_workspace_size(built_, input_, params_, &bytes); !s.ok()) return s;
    workspace_bytes_ = bytes;
    return workspace_.allocate(static_cast<int64_t>(std::max<size_t>(bytes, 256)));
  }

  /// The new keys read by k-means (n_iters + 1 assignments and n_iters updates) and by the copy,
  /// the new values read once, both written into the index once.
  int64_t bytes_moved() const override {
    const IvfShape& s = built_.shape;
    const int64_t keys = s.heads * input_.seq * s.dim * 2;
    const int64_t values = s.heads * input_.seq * s.value_dim * 2;
    return keys * (2 * params_.n_iters + 3) + 2 * values;
  }

  /// The products of k-means: each new token against the new clusters, n_iters + 1 times.
  double flops() const override {
    const IvfShape& s = built_.shape;
    return 2.0 * static_cast<double>(s.heads) * static_cast<double>(input_.seq) *
           static_cast<double>(params_.n_clusters) * static_cast<double>(s.dim) *
           (params_.n_iters + 1);
  }

  /// Every call appends the new tokens to the index as built: the same slots, the same result.
  Status run(cudaStream_t stream) override {
    IvfIndex index = built_;
    return ivf_extend(input_, params_, &index, workspace_.get(), workspace_bytes_, stream);
  }

  Status check(cudaStream_t stream, ref::CompareResult* result) override {
    if (Status s = index_.checkable("ivf_extend"); !s.ok()) return s;
    // Poisoned, built again and extended: the new slots are all the extension's writing.
    if (Status s = index_.rebuild_poisoned("ivf_extend", stream); !s.ok()) return s;
    IvfIndex index = built_;
    if (Status s = ivf_extend(input_, params_, &index, workspace_.get(), workspace_bytes_, stream);
        !s.ok()) {
      return s;
    }
    if (cudaStreamSynchronize(stream) != cudaSuccess) {
      return Status(StatusCode::kCudaError, "ivf_extend: the extension failed");
    }
    const IvfShape& sh = built_.shape;
    const IvfLayout& layout = index_.layout();
    const int64_t h = sh.heads, cap = sh.capacity, cm = sh.max_clusters, d = sh.dim;
    const int64_t old_tokens = built_.tokens, c0 = built_.n_clusters;
    const int64_t t_new = input_.seq, m = params_.n_clusters, drawn = index_.drawn_tokens();
    const auto offsets = index_.download<int64_t>(layout.offsets, h * (cm + 1));
    const auto ids = index_.download<int32_t>(layout.ids, h * cap);
    const auto keys_out = index_.download<unsigned char>(layout.keys, h * cap * d * 2);
    const auto centroids = index_.download<float>(layout.centroids, h * cm * d);
    const auto means = index_.download<float>(layout.means, h * d);
    const auto* keys = static_cast<const unsigned char*>(index_.keys().data());
    ref::HostArray got(DType::kFloat32, 2 + h * (t_new + 2));
    std::vector<double> want(static_cast<size_t>(got.size()));
    int64_t at = 0;
    got.set(at, static_cast<double>(index.tokens));
    want[at++] = static_cast<double>(old_tokens + t_new);
    got.set(at, static_cast<double>(index.n_clusters));
    want[at++] = static_cast<double>(c0 + m);
    for (int64_t hh = 0; hh < h; ++hh) {
      const int64_t* off = offsets.data() + hh * (cm + 1);
      // The new clusters hold exactly the new slots.
      got.set(at, static_cast<double>(off[c0]));
      want[at++] = static_cast<double>(old_tokens);
      got.set(at, static_cast<double>(off[c0 + m]));
      want[at++] = static_cast<double>(old_tokens + t_new);
      // Each new token (position old_tokens + t): where it is placed, once, its key its own.
      std::vector<int> seen(static_cast<size_t>(t_new), 0);
      std::vector<int64_t> label(static_cast<size_t>(t_new), -1);
      for (int64_t j = c0; j < c0 + m; ++j) {
        for (int64_t q = std::max(off[j], old_tokens); q < std::min(off[j + 1], old_tokens + t_new);
             ++q) {
          const int64_t t = static_cast<int64_t>(ids[hh * cap + q]) - old_tokens;
          if (t < 0 || t >= t_new) continue;
          const unsigned char* want_key = keys + (hh * drawn + old_tokens + t) * d * 2;
          if (std::memcmp(&keys_out[(hh * cap + q) * d * 2], want_key,
                          static_cast<size_t>(d * 2)) == 0) {
            ++seen[t];
            label[t] = j - c0;
          }
        }
      }
      // The new cluster of the largest inner product among the returned new centroids.
      const ref::KmeansReference nearest = nearest_centroids(
          sh.dtype, keys + (hh * drawn + old_tokens) * d * 2, t_new, d,
          {centroids.begin() + (hh * cm + c0) * d, centroids.begin() + (hh * cm + c0 + m) * d}, m,
          {means.begin() + hh * d, means.begin() + (hh + 1) * d});
      for (int64_t t = 0; t < t_new; ++t) {
        const bool right = seen[t] == 1 && nearest_or_tied(nearest, t, label[t], sh.dtype);
        got.set(at, right ? 1.0 : 0.0);
        want[at++] = 1.0;
      }
    }
    *result = ref::compare(got, want, ref::Tolerance{1e-4, 1.0});
    return Status();
  }

 private:
  CaseConfig config_;
  DeviceIndex index_;
  IvfIndex built_;
  IvfInput input_;
  IvfExtendParams params_;
  DeviceBuffer workspace_;
  size_t workspace_bytes_ = 0;
};

std::vector<DimSpec> index_dims() {
  return {{"heads", "kv heads", 8},
          {"seq", "tokens per head", 32768},
          {"dim", "key dimensions (a multiple of 8 up to 512)", 128},
          {"clusters", "clusters per head (a multiple of segments)", 2048},
          {"segments", "contiguous segments per head, each clustered on its own", 4},
          {"n_iters", "spherical k-means iterations per segment", 10},
          {"pass",
           "the final assignment: global (all of the head's clusters, pruned exactly), segments, "
           "or dense (global, every token against every cluster)",
           0,
           {{"global", 0}, {"segments", 1}, {"dense", 2}}},
          {"values", "values as well as keys (1) or keys alone (0)", 1},
          {"keys_model",
           "the keys' model (dev/harness/key_models.h): mix8 (eight directions and an offset), "
           "gaussian (isotropic), llm (offset, outlier channels, drifting low-rank content, RoPE)",
           0,
           {{"mix8", 0}, {"gaussian", 1}, {"llm", 2}}}};
}

/// The build's sizes of a case, checked by the library.
Status validate_build(const CaseConfig& config) {
  IvfInput input;
  input.seq = dim_value(config.dims, "seq");
  size_t bytes = 0;
  return ivf_build_workspace_size(shape_of(config), input, build_params_of(config), &bytes);
}

/// A case of type C, prepared (its device memory and inputs).
template <typename C>
Status make_prepared(const CaseConfig& config, std::unique_ptr<OpCase>* out) {
  auto c = std::make_unique<C>(config);
  Status status = c->prepare();
  if (status.ok()) *out = std::move(c);
  return status;
}

OpDescriptor build_descriptor() {
  OpDescriptor op;
  op.name = "ivf_build";
  op.summary = "IVF index over attention keys and values: every head and segment in one call";
  op.dtypes = {DType::kFloat16, DType::kBFloat16};
  op.dims = index_dims();
  auto shape = [](int64_t heads, int64_t seq, int64_t clusters, int64_t segments) {
    return Dims{{"heads", heads},       {"seq", seq},    {"dim", 128}, {"clusters", clusters},
                {"segments", segments}, {"n_iters", 10}, {"pass", 0},  {"values", 1}};
  };
  op.bench_shapes = {shape(32, 131072, 8192, 16), shape(8, 32768, 2048, 4)};
  op.headline_shapes = op.bench_shapes;
  op.validate = validate_build;
  op.make_case = make_prepared<IvfBuildCase>;
  return op;
}

OpDescriptor search_descriptor() {
  OpDescriptor op;
  op.name = "ivf_search";
  op.summary = "IVF index search: the k best tokens of each query among its probed clusters";
  op.dtypes = {DType::kFloat16, DType::kBFloat16};
  op.dims = index_dims();
  op.dims.push_back({"q_heads", "query heads (a multiple of heads)", 32});
  op.dims.push_back({"queries", "queries per query head", 1});
  op.dims.push_back({"k", "tokens per query", 1024});
  op.dims.push_back({"n_probe", "clusters probed per query", 64});
  op.dims.push_back({"max_candidates", "candidates kept per query (0: every token)", 0});
  auto shape = [](int64_t seq, int64_t clusters, int64_t n_probe, int64_t max_candidates) {
    return Dims{{"heads", 8},
                {"seq", seq},
                {"dim", 128},
                {"clusters", clusters},
                {"segments", 16},
                {"n_iters", 10},
                {"pass", 0},
                {"values", 1},
                {"q_heads", 32},
                {"queries", 1},
                {"k", 1024},
                {"n_probe", n_probe},
                {"max_candidates", max_candidates}};
  };
  op.bench_shapes = {shape(131072, 8192, 147, 0), shape(131072, 8192, 147, 16384)};
  op.headline_shapes = op.bench_shapes;
  op.validate = [](const CaseConfig& config) {
    if (Status s = validate_build(config); !s.ok()) return s;
    const IvfIndex index = held_of(config);
    const IvfQueries queries = queries_of(config);
    IvfSearchParams params;
    params.k = dim_value(config.dims, "k");
    params.n_probe = dim_value(config.dims, "n_probe");
    params.max_candidates = dim_value(config.dims, "max_candidates", 0);
    size_t bytes = 0;
    return ivf_search_workspace_size(index, queries, params, &bytes);
  };
  op.make_case = make_prepared<IvfSearchCase>;
  return op;
}

OpDescriptor extend_descriptor() {
  OpDescriptor op;
  op.name = "ivf_extend";
  op.summary = "IVF index extension: new tokens per head clustered on their own and appended";
  op.dtypes = {DType::kFloat16, DType::kBFloat16};
  op.dims = index_dims();
  op.dims.push_back({"new_tokens", "tokens appended per head", 1024});
  op.dims.push_back({"new_clusters", "clusters per head the new tokens form", 64});
  op.bench_shapes = {Dims{{"heads", 32},
                          {"seq", 8192},
                          {"dim", 128},
                          {"clusters", 512},
                          {"segments", 8},
                          {"n_iters", 10},
                          {"pass", 0},
                          {"values", 1},
                          {"new_tokens", 1024},
                          {"new_clusters", 64}}};
  op.headline_shapes = op.bench_shapes;
  op.validate = [](const CaseConfig& config) {
    if (Status s = validate_build(config); !s.ok()) return s;
    IvfIndex index = held_of(config);
    index.shape.capacity += dim_value(config.dims, "new_tokens");
    index.shape.max_clusters += dim_value(config.dims, "new_clusters");
    IvfInput input;
    input.seq = dim_value(config.dims, "new_tokens");
    IvfExtendParams params;
    params.n_clusters = dim_value(config.dims, "new_clusters");
    params.n_iters = static_cast<int>(dim_value(config.dims, "n_iters", 10));
    size_t bytes = 0;
    return ivf_extend_workspace_size(index, input, params, &bytes);
  };
  op.make_case = make_prepared<IvfExtendCase>;
  return op;
}

OpDescriptor attention_descriptor() {
  OpDescriptor op;
  op.name = "ivf_attention";
  op.summary = "decode attention over the index: the probed clusters exactly, the next estimated";
  op.dtypes = {DType::kFloat16, DType::kBFloat16};
  op.dims = index_dims();
  op.dims.push_back({"q_heads", "query heads (a multiple of heads)", 32});
  op.dims.push_back({"queries", "queries per query head", 1});
  op.dims.push_back({"n_probe", "clusters attended exactly per row", 147});
  op.dims.push_back({"n_estimate", "the next clusters, estimated", 1900});
  op.dims.push_back({"extra", "extra tokens per kv head attended exactly", 68});
  op.dims.push_back(
      {"group", "zones per kv head over the query group (1) or per query head (0)", 1});
  auto shape = [](int64_t seq, int64_t clusters, int64_t n_probe, int64_t n_estimate) {
    return Dims{{"heads", 8},     {"seq", seq},    {"dim", 128},         {"clusters", clusters},
                {"segments", 16}, {"n_iters", 10}, {"pass", 0},          {"values", 1},
                {"q_heads", 32},  {"queries", 1},  {"n_probe", n_probe}, {"n_estimate", n_estimate},
                {"extra", 68},    {"group", 1}};
  };
  op.bench_shapes = {shape(131072, 8192, 147, 1900), shape(131072, 8192, 147, 0),
                     shape(1048576, 65536, 1176, 15200)};
  op.headline_shapes = {op.bench_shapes[0]};
  op.validate = [](const CaseConfig& config) {
    if (Status s = validate_build(config); !s.ok()) return s;
    size_t bytes = 0;  // the library refuses an index of keys alone (--values 0) itself
    return ivf_attention_workspace_size(held_of(config), queries_of(config),
                                        attention_params_of(config), extra_of(config), &bytes);
  };
  op.make_case = make_prepared<IvfAttentionCase>;
  return op;
}

[[maybe_unused]] const bool kBuildRegistered = register_op(build_descriptor());
[[maybe_unused]] const bool kAttentionRegistered = register_op(attention_descriptor());
[[maybe_unused]] const bool kSearchRegistered = register_op(search_descriptor());
[[maybe_unused]] const bool kExtendRegistered = register_op(extend_descriptor());

}  // namespace
}  // namespace cudaops::harness
