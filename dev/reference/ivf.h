#pragma once

// The reference of the IVF-Flat index over attention KV caches (docs/ivf.md), in double
// precision on the host: the build (centring by each head's mean, balanced segments clustered by
// spherical k-means, the optional global pass, the CSR layout) and the search (clusters ranked by
// the query's inner product with their centroids, the probed clusters' tokens scored exactly),
// with exact search beside it. The GPU index is checked against these.
#include <cstdint>
#include <vector>

#include "reference/host_array.h"

namespace cudaops::ref {

struct IvfShape {
  int64_t heads = 1;        ///< kv heads H
  int64_t seq = 0;          ///< tokens S per head
  int64_t dim = 0;          ///< D
  int64_t clusters = 0;     ///< per head, a multiple of segments
  int64_t segments = 1;     ///< contiguous segments per head, each clustered on its own
  int n_iters = 10;         ///< spherical k-means iterations per segment
  bool global_pass = true;  ///< every token assigned against all of its head's clusters at the end
};

struct IvfIndexReference {
  IvfShape shape;
  std::vector<double> means;      ///< [H, D] each head's mean key
  std::vector<double> centroids;  ///< [H, C, D] unit length (or zero), of the centred keys
  std::vector<int32_t> labels;    ///< [H, S] each token's cluster
  std::vector<int64_t> offsets;   ///< [H, C + 1] each cluster's range in `ids`
  std::vector<int64_t> ids;       ///< [H, S] token positions in cluster order (ascending within)
};

/// Segment s of S tokens split into `segments` as numpy.array_split does: [begin, end).
void ivf_segment(int64_t seq, int64_t segments, int64_t s, int64_t* begin, int64_t* end);

/// Builds the index of keys [H, S, D] (any library float dtype).
IvfIndexReference ivf_build(const HostArray& keys, const IvfShape& shape);

struct IvfSearchReference {
  std::vector<double> scores;  ///< [Hq, Q, k], best first; -inf past the candidates
  std::vector<int64_t> ids;    ///< [Hq, Q, k] token positions; -1 past the candidates
};

/// The probed clusters of each query (queries [Hq, Q, D], Hq a multiple of H; query head g reads
/// kv head g / (Hq / H)): the n_probe clusters of the largest q . c, empty clusters never, ties
/// to the lower cluster. [Hq, Q, n_probe], -1 where fewer clusters are non-empty.
std::vector<int32_t> ivf_probe(const IvfIndexReference& index, const HostArray& queries,
                               int64_t q_heads, int64_t n_queries, int64_t n_probe);

/// The scores clusters are chosen by for retrieval: with `group`, rows (kv head h, query q) of
/// softmax_c(q_g . c / sqrt(D)) summed over h's query heads g; without, rows (query head, query)
/// of q . c. [rows, C], -inf for empty clusters.
std::vector<double> ivf_cluster_scores(const IvfIndexReference& index, const HostArray& queries,
                                       int64_t q_heads, int64_t n_queries, bool group);

/// The n_probe clusters of the largest ivf_cluster_scores per row (ties to the lower cluster),
/// in ascending order, -1 past the non-empty clusters: [rows, n_probe].
std::vector<int32_t> ivf_clusters(const IvfIndexReference& index, const HostArray& queries,
                                  int64_t q_heads, int64_t n_queries, int64_t n_probe, bool group);

/// The k best tokens (q . k with the original keys, ties to the lower position) among the probed
/// clusters' tokens.
IvfSearchReference ivf_search(const IvfIndexReference& index, const HostArray& keys,
                              const HostArray& queries, int64_t q_heads, int64_t n_queries,
                              int64_t k, int64_t n_probe);

/// What the decode attention reads of an index, as the index holds it (in cluster order).
struct IvfAttentionIndex {
  int64_t heads = 0, tokens = 0, clusters = 0, dim = 0, value_dim = 0;
  std::vector<int64_t> offsets;    ///< [H, C + 1]
  HostArray keys;                  ///< [H, tokens, D] in cluster order
  HostArray values;                ///< [H, tokens, Dv]
  HostArray key_means;             ///< [H, C, D] each cluster's mean key as the index holds it
  std::vector<double> value_sums;  ///< [H, C, Dv]
};

/// The zones of each row (rows: (kv head, query) with `group`, else (query head, query)):
/// `exact` [rows, n_exact] and, unless empty, `wide` [rows, n_wide], the exact and estimated
/// zones together; -1 past the non-empty clusters.
struct IvfAttentionZones {
  int64_t n_exact = 0, n_wide = 0;
  std::vector<int32_t> exact, wide;
};

/// The decode attention of docs/ivf.md over those zones, in double: out [Hq, Q, Dv] and lse
/// [Hq, Q] (natural log of the denominator plus the maximum; -inf where nothing is attended).
/// extra_keys [H, X, D] and extra_values [H, X, Dv] (X = extra_tokens, may be 0).
void ivf_attention(const IvfAttentionIndex& index, const HostArray& queries, int64_t q_heads,
                   int64_t n_queries, const IvfAttentionZones& zones, bool group,
                   const HostArray& extra_keys, const HostArray& extra_values, int64_t extra_tokens,
                   double scale, std::vector<double>* out, std::vector<double>* lse);

/// Exact attention of queries [Hq, Q, D] over all S keys [H, S, D] and values [H, S, Dv] of
/// their kv heads (query head g reads kv head g / (Hq / H)), in double: out and lse as above.
void full_attention(const HostArray& keys, const HostArray& values, int64_t heads, int64_t seq,
                    int64_t dim, int64_t value_dim, const HostArray& queries, int64_t q_heads,
                    int64_t n_queries, double scale, std::vector<double>* out,
                    std::vector<double>* lse);

/// The k best tokens of all S, as ivf_search ranks them.
IvfSearchReference exact_search(const HostArray& keys, const HostArray& queries,
                                const IvfShape& shape, int64_t q_heads, int64_t n_queries,
                                int64_t k);

}  // namespace cudaops::ref
