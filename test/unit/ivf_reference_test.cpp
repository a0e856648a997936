// The IVF index's reference (reference/ivf.h): the layout it builds (every token in exactly one
// cluster, CSR ranges consistent with the labels, ascending within a cluster, balanced
// segments), and the search: probing every cluster is exact search, grouped-query heads read
// their kv head, too few candidates pad, and on clustered data a few probes find most of the
// exact top k.
#include "reference/ivf.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <set>
#include <stdexcept>
#include <vector>

namespace cudaops::ref {
namespace {

/// Keys [H, S, D] drawn around `centres` centres per head, plus a large common offset (as
/// attention keys have); queries [Hq, Q, D] near some of their kv head's centres.
struct Data {
  HostArray keys, queries;
};

Data MakeData(const IvfShape& shape, int64_t q_heads, int64_t n_queries, int centres,
              uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  const int64_t H = shape.heads, S = shape.seq, D = shape.dim;
  std::vector<double> mean(static_cast<size_t>(D));
  for (double& m : mean)
    m = 3.0 + normal(rng);
  std::vector<double> c(static_cast<size_t>(H * centres * D));
  for (double& v : c)
    v = normal(rng);
  Data data{HostArray(DType::kFloat16, H * S * D),
            HostArray(DType::kFloat16, q_heads * n_queries * D)};
  for (int64_t h = 0; h < H; ++h) {
    for (int64_t t = 0; t < S; ++t) {
      const int64_t which = static_cast<int64_t>(rng() % static_cast<uint64_t>(centres));
      for (int64_t e = 0; e < D; ++e) {
        data.keys.set((h * S + t) * D + e,
                      mean[static_cast<size_t>(e)] +
                          c[static_cast<size_t>((h * centres + which) * D + e)] +
                          0.15 * normal(rng));
      }
    }
  }
  const int64_t group = q_heads / H;
  for (int64_t g = 0; g < q_heads; ++g) {
    for (int64_t q = 0; q < n_queries; ++q) {
      const int64_t which = static_cast<int64_t>(rng() % static_cast<uint64_t>(centres));
      for (int64_t e = 0; e < D; ++e) {
        data.queries.set(
            (g * n_queries + q) * D + e,
            c[static_cast<size_t>(((g / group) * centres + which) * D + e)] + 0.1 * normal(rng));
      }
    }
  }
  return data;
}

IvfShape SmallShape(bool global_pass) {
  IvfShape s;
  s.heads = 2;
  s.seq = 301;  // not a multiple of the segments
  s.dim = 16;
  s.clusters = 12;
  s.segments = 3;
  s.n_iters = 5;
  s.global_pass = global_pass;
  return s;
}

TEST(IvfReference, BalancedSegments) {
  int64_t b = 0, e = 0, covered = 0;
  for (int64_t s = 0; s < 3; ++s) {
    ivf_segment(301, 3, s, &b, &e);
    EXPECT_EQ(b, covered);
    EXPECT_TRUE(e - b == 100 || e - b == 101);
    covered = e;
  }
  EXPECT_EQ(covered, 301);
}

TEST(IvfReference, EveryTokenInExactlyOneCluster) {
  for (bool global_pass : {false, true}) {
    const IvfShape shape = SmallShape(global_pass);
    const Data data = MakeData(shape, 2, 1, 8, 11);
    const IvfIndexReference index = ivf_build(data.keys, shape);
    const int64_t C = shape.clusters, S = shape.seq;
    for (int64_t h = 0; h < shape.heads; ++h) {
      const int64_t* off = index.offsets.data() + h * (C + 1);
      EXPECT_EQ(off[0], 0);
      EXPECT_EQ(off[C], S);
      std::set<int64_t> seen;
      for (int64_t c = 0; c < C; ++c) {
        ASSERT_LE(off[c], off[c + 1]);
        for (int64_t p = off[c]; p < off[c + 1]; ++p) {
          const int64_t t = index.ids[static_cast<size_t>(h * S + p)];
          EXPECT_EQ(index.labels[static_cast<size_t>(h * S + t)], c);
          if (p > off[c]) {
            EXPECT_LT(index.ids[static_cast<size_t>(h * S + p - 1)], t);
          }
          EXPECT_TRUE(seen.insert(t).second) << "token " << t << " twice";
        }
      }
      EXPECT_EQ(static_cast<int64_t>(seen.size()), S);
      if (!global_pass) {
        // Without the global pass a token stays in its segment's clusters.
        for (int64_t s = 0; s < shape.segments; ++s) {
          int64_t b = 0, e = 0;
          ivf_segment(S, shape.segments, s, &b, &e);
          const int64_t per = C / shape.segments;
          for (int64_t t = b; t < e; ++t) {
            const int32_t c = index.labels[static_cast<size_t>(h * S + t)];
            EXPECT_TRUE(c >= s * per && c < (s + 1) * per) << "token " << t;
          }
        }
      }
    }
  }
}

TEST(IvfReference, ProbingEveryClusterIsExactSearch) {
  const IvfShape shape = SmallShape(true);
  const int64_t q_heads = 4, n_queries = 3, k = 10;
  const Data data = MakeData(shape, q_heads, n_queries, 8, 12);
  const IvfIndexReference index = ivf_build(data.keys, shape);
  const IvfSearchReference all =
      ivf_search(index, data.keys, data.queries, q_heads, n_queries, k, shape.clusters);
  const IvfSearchReference exact =
      exact_search(data.keys, data.queries, shape, q_heads, n_queries, k);
  EXPECT_EQ(all.ids, exact.ids);
  EXPECT_EQ(all.scores, exact.scores);
  // Query heads 0 and 1 read kv head 0, 2 and 3 kv head 1: the same query on head 1 or head 2
  // sees other tokens' scores.
  for (int64_t j = 0; j < k; ++j) {
    const int64_t id = exact.ids[static_cast<size_t>(2 * n_queries * k + j)];
    double s = 0;
    for (int64_t e = 0; e < shape.dim; ++e)
      s += data.queries.get((2 * n_queries) * shape.dim + e) *
           data.keys.get((1 * shape.seq + id) * shape.dim + e);
    EXPECT_EQ(exact.scores[static_cast<size_t>(2 * n_queries * k + j)], s);
  }
}

TEST(IvfReference, FewCandidatesPad) {
  const IvfShape shape = SmallShape(true);
  const Data data = MakeData(shape, 2, 1, 8, 13);
  const IvfIndexReference index = ivf_build(data.keys, shape);
  const IvfSearchReference r = ivf_search(index, data.keys, data.queries, 2, 1, shape.seq, 1);
  const std::vector<int32_t> probed = ivf_probe(index, data.queries, 2, 1, 1);
  const int64_t c = probed[0];
  const int64_t size =
      index.offsets[static_cast<size_t>(c + 1)] - index.offsets[static_cast<size_t>(c)];
  for (int64_t j = 0; j < shape.seq; ++j) {
    if (j < size) {
      EXPECT_GE(r.ids[static_cast<size_t>(j)], 0);
      if (j > 0) {
        EXPECT_GE(r.scores[static_cast<size_t>(j - 1)], r.scores[static_cast<size_t>(j)]);
      }
    } else {
      EXPECT_EQ(r.ids[static_cast<size_t>(j)], -1);
      EXPECT_TRUE(std::isinf(r.scores[static_cast<size_t>(j)]) &&
                  r.scores[static_cast<size_t>(j)] < 0);
    }
  }
}

TEST(IvfReference, FewProbesFindMostOfTheTopK) {
  IvfShape shape;
  shape.heads = 2;
  shape.seq = 2000;
  shape.dim = 32;
  shape.clusters = 40;
  shape.segments = 2;
  shape.n_iters = 8;
  const int64_t q_heads = 4, n_queries = 8, k = 20;
  const Data data = MakeData(shape, q_heads, n_queries, 20, 14);
  const IvfIndexReference index = ivf_build(data.keys, shape);
  const IvfSearchReference exact =
      exact_search(data.keys, data.queries, shape, q_heads, n_queries, k);
  const IvfSearchReference probed =
      ivf_search(index, data.keys, data.queries, q_heads, n_queries, k, 4);  // 10% of clusters
  int64_t found = 0;
  for (int64_t row = 0; row < q_heads * n_queries; ++row) {
    std::set<int64_t> want(exact.ids.begin() + row * k, exact.ids.begin() + (row + 1) * k);
    for (int64_t j = 0; j < k; ++j)
      found += want.count(probed.ids[static_cast<size_t>(row * k + j)]);
  }
  const double recall = static_cast<double>(found) / static_cast<double>(q_heads * n_queries * k);
  EXPECT_GE(recall, 0.9) << "recall@" << k << " probing 4 of 40 clusters";
}

TEST(IvfReference, RefusesBadShapes) {
  IvfShape shape = SmallShape(true);
  const Data data = MakeData(shape, 2, 1, 8, 15);
  shape.clusters = 13;  // not a multiple of the segments
  EXPECT_THROW(ivf_build(data.keys, shape), std::invalid_argument);
  shape = SmallShape(true);
  shape.clusters = 3 * 101;  // more clusters than a segment has tokens
  EXPECT_THROW(ivf_build(data.keys, shape), std::invalid_argument);
  shape = SmallShape(true);
  const IvfIndexReference index = ivf_build(data.keys, shape);
  EXPECT_THROW(ivf_search(index, data.keys, data.queries, 3, 1, 5, 2), std::invalid_argument);
  EXPECT_THROW(ivf_search(index, data.keys, data.queries, 2, 1, 5, 0), std::invalid_argument);
  EXPECT_THROW(ivf_search(index, data.keys, data.queries, 2, 1, 0, 2), std::invalid_argument);
}

}  // namespace
}  // namespace cudaops::ref
