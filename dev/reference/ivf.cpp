#include "reference/ivf.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <stdexcept>
#include <string>
#include <utility>

#include "reference/kmeans.h"

namespace cudaops::ref {

namespace {

void require(bool ok, const std::string& what) {
  if (!ok) throw std::invalid_argument("ivf reference: " + what);
}

double dot(const HostArray& a, int64_t at, const std::vector<double>& b, int64_t bt, int64_t d) {
  double s = 0;
  for (int64_t e = 0; e < d; ++e)
    s += a.get(at + e) * b[static_cast<size_t>(bt + e)];
  return s;
}

/// The best `k` of (score, position) pairs, best first (ties to the lower position), padded with
/// (-inf, -1).
void take_best(std::vector<std::pair<double, int64_t>>* candidates, int64_t k, double* scores,
               int64_t* ids) {
  auto better = [](const std::pair<double, int64_t>& a, const std::pair<double, int64_t>& b) {
    return a.first != b.first ? a.first > b.first : a.second < b.second;
  };
  const auto keep = std::min<size_t>(candidates->size(), static_cast<size_t>(k));
  std::partial_sort(candidates->begin(), candidates->begin() + static_cast<long>(keep),
                    candidates->end(), better);
  for (int64_t j = 0; j < k; ++j) {
    const bool real = static_cast<size_t>(j) < keep;
    scores[j] = real ? (*candidates)[static_cast<size_t>(j)].first
                     : -std::numeric_limits<double>::infinity();
    ids[j] = real ? (*candidates)[static_cast<size_t>(j)].second : -1;
  }
}

void check_queries(const IvfShape& shape, const HostArray& queries, int64_t q_heads,
                   int64_t n_queries) {
  require(q_heads >= shape.heads && q_heads % shape.heads == 0,
          "q_heads must be a multiple of the kv heads");
  require(n_queries >= 0 && queries.size() == q_heads * n_queries * shape.dim,
          "queries must be [q_heads, n_queries, dim]");
}

/// For every query row (query head g, kv head h = g / group), the k best of the tokens that
/// `tokens(h, row, out)` lists, scored against the original keys.
template <typename Tokens>
IvfSearchReference search_rows(const HostArray& keys, const HostArray& queries,
                               const IvfShape& shape, int64_t q_heads, int64_t n_queries, int64_t k,
                               Tokens&& tokens) {
  const int64_t D = shape.dim, S = shape.seq, group = q_heads / shape.heads;
  IvfSearchReference out;
  out.scores.resize(static_cast<size_t>(q_heads * n_queries * k));
  out.ids.resize(out.scores.size());
  std::vector<double> q_values(static_cast<size_t>(D));
  std::vector<int64_t> list;
  for (int64_t g = 0; g < q_heads; ++g) {
    const int64_t h = g / group;
    for (int64_t q = 0; q < n_queries; ++q) {
      const int64_t row = g * n_queries + q;
      for (int64_t e = 0; e < D; ++e)
        q_values[static_cast<size_t>(e)] = queries.get(row * D + e);
      list.clear();
      tokens(h, row, &list);
      std::vector<std::pair<double, int64_t>> candidates;
      candidates.reserve(list.size());
      for (int64_t t : list)
        candidates.emplace_back(dot(keys, (h * S + t) * D, q_values, 0, D), t);
      take_best(&candidates, k, out.scores.data() + row * k, out.ids.data() + row * k);
    }
  }
  return out;
}

}  // namespace

void ivf_segment(int64_t seq, int64_t segments, int64_t s, int64_t* begin, int64_t* end) {
  const int64_t base = seq / segments, extra = seq % segments;
  *begin = s * base + std::min(s, extra);
  *end = *begin + base + (s < extra ? 1 : 0);
}

IvfIndexReference ivf_build(const HostArray& keys, const IvfShape& shape) {
  const int64_t H = shape.heads, S = shape.seq, D = shape.dim, C = shape.clusters;
  const int64_t G = shape.segments;
  require(H >= 1 && S >= 1 && D >= 1 && G >= 1 && C >= G && C % G == 0,
          "heads, seq, dim >= 1 and clusters a positive multiple of segments");
  require(keys.size() == H * S * D, "keys must be [heads, seq, dim]");
  const int64_t per_segment = C / G;
  require(S / G >= per_segment, "every segment needs at least clusters / segments tokens");
  IvfIndexReference index;
  index.shape = shape;
  index.means.assign(static_cast<size_t>(H * D), 0.0);
  for (int64_t h = 0; h < H; ++h) {
    for (int64_t t = 0; t < S; ++t) {
      for (int64_t e = 0; e < D; ++e)
        index.means[static_cast<size_t>(h * D + e)] += keys.get((h * S + t) * D + e);
    }
    for (int64_t e = 0; e < D; ++e)
      index.means[static_cast<size_t>(h * D + e)] /= static_cast<double>(S);
  }
  // The centred keys, in float32 as the library holds them.
  HostArray z(DType::kFloat32, H * S * D);
  for (int64_t h = 0; h < H; ++h) {
    for (int64_t t = 0; t < S; ++t) {
      for (int64_t e = 0; e < D; ++e) {
        const int64_t at = (h * S + t) * D + e;
        z.set(at, keys.get(at) - index.means[static_cast<size_t>(h * D + e)]);
      }
    }
  }
  // Every (head, segment) a problem of one k-means call, by offsets into the [H x S, D] rows.
  KmeansLayout segments;
  segments.batch = H * G;
  segments.d = D;
  segments.ld = D;
  segments.offsets.push_back(0);
  for (int64_t h = 0; h < H; ++h) {
    for (int64_t s = 0; s < G; ++s) {
      int64_t begin = 0, end = 0;
      ivf_segment(S, G, s, &begin, &end);
      segments.offsets.push_back(h * S + end);
      segments.n = std::max(segments.n, end - begin);
    }
  }
  KmeansParams params;
  params.n_clusters = per_segment;
  params.n_iters = shape.n_iters;
  params.metric = KmeansMetric::kCosine;
  params.init = KmeansInit::kStrided;
  const KmeansReference fit = kmeans(z, segments, params);
  index.centroids.assign(static_cast<size_t>(H * C * D), 0.0);
  index.labels.assign(static_cast<size_t>(H * S), 0);
  for (int64_t h = 0; h < H; ++h) {
    for (int64_t s = 0; s < G; ++s) {
      const int64_t b = h * G + s;
      for (int64_t j = 0; j < per_segment * D; ++j) {
        index.centroids[static_cast<size_t>((h * C + s * per_segment) * D + j)] =
            fit.centroids[static_cast<size_t>(b * per_segment * D + j)];
      }
      int64_t begin = 0, end = 0;
      ivf_segment(S, G, s, &begin, &end);
      for (int64_t t = begin; t < end; ++t) {
        index.labels[static_cast<size_t>(h * S + t)] = static_cast<int32_t>(
            s * per_segment + fit.labels[static_cast<size_t>(b * segments.n + (t - begin))]);
      }
    }
  }
  if (shape.global_pass) {
    KmeansLayout all;
    all.batch = H;
    all.n = S;
    all.d = D;
    all.ld = D;
    all.batch_stride = S * D;
    const KmeansReference assigned =
        kmeans_assign(z, all, index.centroids, C, {}, KmeansMetric::kCosine);
    index.labels = assigned.labels;
  }
  // CSR: each head's tokens grouped by cluster, ascending within a cluster.
  index.offsets.assign(static_cast<size_t>(H * (C + 1)), 0);
  index.ids.assign(static_cast<size_t>(H * S), 0);
  for (int64_t h = 0; h < H; ++h) {
    int64_t* off = index.offsets.data() + h * (C + 1);
    for (int64_t t = 0; t < S; ++t)
      ++off[index.labels[static_cast<size_t>(h * S + t)] + 1];
    for (int64_t c = 0; c < C; ++c)
      off[c + 1] += off[c];
    std::vector<int64_t> cursor(off, off + C);
    for (int64_t t = 0; t < S; ++t) {
      const int32_t c = index.labels[static_cast<size_t>(h * S + t)];
      index.ids[static_cast<size_t>(h * S + cursor[static_cast<size_t>(c)]++)] = t;
    }
  }
  return index;
}

std::vector<int32_t> ivf_probe(const IvfIndexReference& index, const HostArray& queries,
                               int64_t q_heads, int64_t n_queries, int64_t n_probe) {
  const IvfShape& sh = index.shape;
  check_queries(sh, queries, q_heads, n_queries);
  require(n_probe >= 1 && n_probe <= sh.clusters, "n_probe must be in [1, clusters]");
  const int64_t C = sh.clusters, D = sh.dim, group = q_heads / sh.heads;
  std::vector<int32_t> probed(static_cast<size_t>(q_heads * n_queries * n_probe), -1);
  for (int64_t g = 0; g < q_heads; ++g) {
    const int64_t h = g / group;
    const int64_t* off = index.offsets.data() + h * (C + 1);
    for (int64_t q = 0; q < n_queries; ++q) {
      std::vector<std::pair<double, int64_t>> ranked;
      for (int64_t c = 0; c < C; ++c) {
        if (off[c + 1] == off[c]) continue;  // empty clusters are never probed
        ranked.emplace_back(
            dot(queries, (g * n_queries + q) * D, index.centroids, (h * C + c) * D, D), c);
      }
      std::vector<double> scores(static_cast<size_t>(n_probe));
      std::vector<int64_t> ids(static_cast<size_t>(n_probe));
      take_best(&ranked, n_probe, scores.data(), ids.data());
      for (int64_t j = 0; j < n_probe; ++j)
        probed[static_cast<size_t>((g * n_queries + q) * n_probe + j)] =
            static_cast<int32_t>(ids[static_cast<size_t>(j)]);
    }
  }
  return probed;
}

std::vector<double> ivf_cluster_scores(const IvfIndexReference& index, const HostArray& queries,
                                       int64_t q_heads, int64_t n_queries, bool group) {
  const IvfShape& sh = index.shape;
  check_queries(sh, queries, q_heads, n_queries);
  const int64_t C = sh.clusters, D = sh.dim, per = q_heads / sh.heads;
  const double inf = std::numeric_limits<double>::infinity();
  const int64_t rows = (group ? sh.heads : q_heads) * n_queries;
  std::vector<double> out(static_cast<size_t>(rows * C), group ? 0.0 : -inf);
  for (int64_t g = 0; g < q_heads; ++g) {
    const int64_t h = g / per;
    const int64_t* off = index.offsets.data() + h * (C + 1);
    for (int64_t q = 0; q < n_queries; ++q) {
      std::vector<double> s(static_cast<size_t>(C), -inf);
      double top = -inf;
      for (int64_t c = 0; c < C; ++c) {
        if (off[c + 1] == off[c]) continue;
        s[static_cast<size_t>(c)] =
            dot(queries, (g * n_queries + q) * D, index.centroids, (h * C + c) * D, D);
        if (group) s[static_cast<size_t>(c)] /= std::sqrt(static_cast<double>(D));
        top = std::max(top, s[static_cast<size_t>(c)]);
      }
      if (!group) {
        std::copy(s.begin(), s.end(), out.begin() + (g * n_queries + q) * C);
        continue;
      }
      double sum = 0.0;
      for (double v : s)
        sum += v == -inf ? 0.0 : std::exp(v - top);
      double* row = out.data() + (h * n_queries + q) * C;
      for (int64_t c = 0; c < C; ++c) {
        const double v = s[static_cast<size_t>(c)];
        if (v != -inf) row[c] += std::exp(v - top) / sum;
      }
    }
  }
  if (group) {
    for (int64_t h = 0; h < sh.heads; ++h) {
      const int64_t* off = index.offsets.data() + h * (C + 1);
      for (int64_t q = 0; q < n_queries; ++q) {
        for (int64_t c = 0; c < C; ++c) {
          if (off[c + 1] == off[c]) out[static_cast<size_t>((h * n_queries + q) * C + c)] = -inf;
        }
      }
    }
  }
  return out;
}

std::vector<int32_t> ivf_clusters(const IvfIndexReference& index, const HostArray& queries,
                                  int64_t q_heads, int64_t n_queries, int64_t n_probe, bool group) {
  const int64_t C = index.shape.clusters;
  require(n_probe >= 1 && n_probe <= C, "n_probe must be in [1, clusters]");
  const std::vector<double> scores = ivf_cluster_scores(index, queries, q_heads, n_queries, group);
  const int64_t rows = static_cast<int64_t>(scores.size()) / C;
  std::vector<int32_t> out(static_cast<size_t>(rows * n_probe), -1);
  for (int64_t r = 0; r < rows; ++r) {
    std::vector<std::pair<double, int64_t>> ranked;
    for (int64_t c = 0; c < C; ++c) {
      const double v = scores[static_cast<size_t>(r * C + c)];
      if (v != -std::numeric_limits<double>::infinity()) ranked.emplace_back(v, c);
    }
    std::vector<double> best(static_cast<size_t>(n_probe));
    std::vector<int64_t> ids(static_cast<size_t>(n_probe));
    take_best(&ranked, n_probe, best.data(), ids.data());
    std::vector<int64_t> chosen;
    for (int64_t id : ids)
      if (id >= 0) chosen.push_back(id);
    std::sort(chosen.begin(), chosen.end());
    for (size_t j = 0; j < chosen.size(); ++j)
      out[static_cast<size_t>(r * n_probe) + j] = static_cast<int32_t>(chosen[j]);
  }
  return out;
}

IvfSearchReference ivf_search(const IvfIndexReference& index, const HostArray& keys,
                              const HostArray& queries, int64_t q_heads, int64_t n_queries,
                              int64_t k, int64_t n_probe) {
  const IvfShape& sh = index.shape;
  require(k >= 1, "k must be >= 1");
  const std::vector<int32_t> probed = ivf_probe(index, queries, q_heads, n_queries, n_probe);
  const int64_t C = sh.clusters, S = sh.seq;
  return search_rows(keys, queries, sh, q_heads, n_queries, k,
                     [&](int64_t h, int64_t row, std::vector<int64_t>* list) {
                       const int64_t* off = index.offsets.data() + h * (C + 1);
                       for (int64_t j = 0; j < n_probe; ++j) {
                         const int32_t c = probed[static_cast<size_t>(row * n_probe + j)];
                         if (c < 0) continue;
                         for (int64_t p = off[c]; p < off[c + 1]; ++p)
                           list->push_back(index.ids[static_cast<size_t>(h * S + p)]);
                       }
                     });
}

IvfSearchReference exact_search(const HostArray& keys, const HostArray& queries,
                                const IvfShape& shape, int64_t q_heads, int64_t n_queries,
                                int64_t k) {
  check_queries(shape, queries, q_heads, n_queries);
  require(k >= 1, "k must be >= 1");
  return search_rows(keys, queries, shape, q_heads, n_queries, k,
                     [&](int64_t, int64_t, std::vector<int64_t>* list) {
                       for (int64_t t = 0; t < shape.seq; ++t)
                         list->push_back(t);
                     });
}

namespace {

/// A softmax folded item by item in double: items of weight w (tokens 1, a cluster its size) and
/// value sum (a token's value, a cluster's value sum).
struct Softmax {
  double m = -std::numeric_limits<double>::infinity(), l = 0.0;
  std::vector<double> acc;
  explicit Softmax(int64_t dv) : acc(static_cast<size_t>(dv), 0.0) {}
  void add(double score, double weight, const double* value_sum) {
    const double m_new = std::max(m, score);
    const double keep = m == -std::numeric_limits<double>::infinity() ? 0.0 : std::exp(m - m_new);
    const double p = std::exp(score - m_new);
    l = l * keep + weight * p;
    for (size_t e = 0; e < acc.size(); ++e)
      acc[e] = acc[e] * keep + p * value_sum[e];
    m = m_new;
  }
  void finish(double* out, double* lse) const {
    for (size_t e = 0; e < acc.size(); ++e)
      out[e] = l > 0.0 ? acc[e] / l : 0.0;
    *lse = l > 0.0 ? m + std::log(l) : -std::numeric_limits<double>::infinity();
  }
};

double dot_row(const HostArray& a, int64_t ai, const HostArray& b, int64_t bi, int64_t d) {
  double s = 0.0;
  for (int64_t e = 0; e < d; ++e)
    s += a.get(ai + e) * b.get(bi + e);
  return s;
}

}  // namespace

void ivf_attention(const IvfAttentionIndex& index, const HostArray& queries, int64_t q_heads,
                   int64_t n_queries, const IvfAttentionZones& zones, bool group,
                   const HostArray& extra_keys, const HostArray& extra_values, int64_t extra_tokens,
                   double scale, std::vector<double>* out, std::vector<double>* lse) {
  const int64_t H = index.heads, C = index.clusters, D = index.dim, Dv = index.value_dim;
  const int64_t S = index.tokens, q_group = q_heads / H;
  out->assign(static_cast<size_t>(q_heads * n_queries * Dv), 0.0);
  lse->assign(static_cast<size_t>(q_heads * n_queries), 0.0);
  std::vector<double> value(static_cast<size_t>(Dv));
  for (int64_t g = 0; g < q_heads; ++g) {
    const int64_t h = g / q_group;
    for (int64_t q = 0; q < n_queries; ++q) {
      const int64_t row = group ? h * n_queries + q : g * n_queries + q;
      const int64_t qi = (g * n_queries + q) * D;
      Softmax sm(Dv);
      std::vector<uint8_t> exact(static_cast<size_t>(C), 0);
      for (int64_t p = 0; p < zones.n_exact; ++p) {
        const int32_t c = zones.exact[static_cast<size_t>(row * zones.n_exact + p)];
        if (c < 0) continue;
        exact[static_cast<size_t>(c)] = 1;
        const int64_t* off = &index.offsets[static_cast<size_t>(h * (C + 1))];
        for (int64_t t = off[c]; t < off[c + 1]; ++t) {
          for (int64_t e = 0; e < Dv; ++e)
            value[e] = index.values.get((h * S + t) * Dv + e);
          sm.add(scale * dot_row(queries, qi, index.keys, (h * S + t) * D, D), 1.0, value.data());
        }
      }
      for (int64_t p = 0; p < zones.n_wide; ++p) {
        const int32_t c = zones.wide[static_cast<size_t>(row * zones.n_wide + p)];
        if (c < 0 || exact[static_cast<size_t>(c)] != 0) continue;
        const int64_t* off = &index.offsets[static_cast<size_t>(h * (C + 1))];
        const int64_t n = off[c + 1] - off[c];
        if (n <= 0) continue;
        const double* sums = &index.value_sums[static_cast<size_t>((h * C + c) * Dv)];
        sm.add(scale * dot_row(queries, qi, index.key_means, (h * C + c) * D, D),
               static_cast<double>(n), sums);
      }
      for (int64_t t = 0; t < extra_tokens; ++t) {
        for (int64_t e = 0; e < Dv; ++e)
          value[e] = extra_values.get((h * extra_tokens + t) * Dv + e);
        sm.add(scale * dot_row(queries, qi, extra_keys, (h * extra_tokens + t) * D, D), 1.0,
               value.data());
      }
      sm.finish(&(*out)[static_cast<size_t>((g * n_queries + q) * Dv)],
                &(*lse)[static_cast<size_t>(g * n_queries + q)]);
    }
  }
}

void full_attention(const HostArray& keys, const HostArray& values, int64_t heads, int64_t seq,
                    int64_t dim, int64_t value_dim, const HostArray& queries, int64_t q_heads,
                    int64_t n_queries, double scale, std::vector<double>* out,
                    std::vector<double>* lse) {
  const int64_t q_group = q_heads / heads;
  out->assign(static_cast<size_t>(q_heads * n_queries * value_dim), 0.0);
  lse->assign(static_cast<size_t>(q_heads * n_queries), 0.0);
  std::vector<double> value(static_cast<size_t>(value_dim));
  for (int64_t g = 0; g < q_heads; ++g) {
    const int64_t h = g / q_group;
    for (int64_t q = 0; q < n_queries; ++q) {
      Softmax sm(value_dim);
      for (int64_t t = 0; t < seq; ++t) {
        for (int64_t e = 0; e < value_dim; ++e)
          value[e] = values.get((h * seq + t) * value_dim + e);
        sm.add(scale * dot_row(queries, (g * n_queries + q) * dim, keys, (h * seq + t) * dim, dim),
               1.0, value.data());
      }
      sm.finish(&(*out)[static_cast<size_t>((g * n_queries + q) * value_dim)],
                &(*lse)[static_cast<size_t>(g * n_queries + q)]);
    }
  }
}

}  // namespace cudaops::ref
