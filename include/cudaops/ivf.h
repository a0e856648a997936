#pragma once

#include <cstddef>
#include <cstdint>

#include "cudaops/dtype.h"
#include "cudaops/export.h"
#include "cudaops/status.h"
#include "cudaops/stream.h"

namespace cudaops {

// An IVF-Flat index over attention KV caches, built over every kv head of a long context in one
// call (docs/ivf.md):
//
// - Keys [H, S, D] (float16 or bfloat16, row-major, D a multiple of 8 up to 512) are centred by
//   each head's mean; each head's S tokens are split into n_segments contiguous segments as
//   numpy.array_split splits them, and every (head, segment) is clustered on its own into
//   n_clusters / n_segments clusters by spherical k-means (strided initialisation), all in one
//   batched k-means call; with the global pass, every token then takes the cluster of the largest
//   inner product among all of its head's clusters (ties to the lower cluster, as kmeans_assign
//   breaks them).
// - Per head, the index keeps the mean (float32), the unit centroids (float32, and rounded to the
//   keys' dtype for scanning), each cluster's range (CSR offsets, no padding), the token positions
//   in cluster order (ascending within a cluster), the keys and values copied in that order, each
//   cluster's size and value sum (float32), and the largest cluster's size.
//
// The index is a view over one device buffer that the caller allocates (ivf_index_size): the
// library's calls allocate nothing, run on the caller's stream without synchronising and can be
// captured in a CUDA graph; the Python index owns its buffer from the module's pool. Capacities
// (tokens and clusters per head) are fixed at allocation, so that appending segments later does
// not reallocate.

/// The sizes an index buffer is laid out for.
/// Most clusters per head an index holds (shape.max_clusters).
inline constexpr int64_t kIvfMaxClusters = 32768;

struct IvfShape {
  int64_t heads = 0;              ///< kv heads H
  int64_t dim = 0;                ///< D of the keys: a multiple of 8, 8 to 512
  int64_t value_dim = 0;          ///< of the values; 0: the index keeps no values
  int64_t capacity = 0;           ///< tokens per head the buffer holds
  int64_t max_clusters = 0;       ///< clusters per head the buffer holds
  DType dtype = DType::kFloat16;  ///< of keys and values: float16 or bfloat16
};

/// Where each array of an index lies in its buffer (byte offsets, each 256-byte aligned).
struct IvfLayout {
  size_t means = 0;         ///< [H, D] float32
  size_t centroids = 0;     ///< [H, max_clusters, D] float32, unit length (zero if empty)
  size_t centroids_lp = 0;  ///< [H, max_clusters, D] the centroids in the keys' dtype
  size_t offsets = 0;       ///< [H, max_clusters + 1] int64: cluster c's tokens at [o_c, o_c+1)
  size_t sizes = 0;         ///< [H, max_clusters] int32
  size_t ids = 0;           ///< [H, capacity] int32 token positions in cluster order
  size_t keys = 0;          ///< [H, capacity, D] the keys in cluster order
  size_t values = 0;        ///< [H, capacity, value_dim] the values in cluster order
  size_t value_sums = 0;    ///< [H, max_clusters, value_dim] float32
  /// [H, max_clusters, D] each cluster's mean key (original coordinates) in the keys' dtype: what
  /// the decode attention's estimate scores a cluster by (zero for an empty cluster)
  size_t key_means = 0;
  size_t largest = 0;  ///< [1] int32: the largest cluster's size over every head
  size_t bytes = 0;    ///< the buffer's size
};

/// An index: the buffer and what it holds. `tokens` and `n_clusters` are set by ivf_build.
struct IvfIndex {
  IvfShape shape;
  void* data = nullptr;    ///< device, ivf_index_size(shape) bytes, 256-byte aligned
  int64_t tokens = 0;      ///< tokens per head held
  int64_t n_clusters = 0;  ///< clusters per head held
};

/// How to build.
struct IvfBuildParams {
  int64_t n_clusters = 0;   ///< per head, a multiple of n_segments
  int64_t n_segments = 1;   ///< contiguous segments per head, each clustered on its own
  int n_iters = 10;         ///< spherical k-means iterations per segment, >= 0
  bool global_pass = true;  ///< reassign every token against all of its head's clusters
  /// The global pass skips, for each tile of tokens, the chunks of centroids that provably cannot
  /// hold any of its tokens' best (same labels as the full pass but at near ties; docs/ivf.md).
  /// Taken where n_clusters >= 4096 (below, the grouping costs what it saves) and dim <= 256.
  /// Keys with no structure (few chunks skipped) build faster without it.
  bool prune = true;
};

/// The keys (and values) to build from: row-major [H, S, D] (and [H, S, value_dim]).
struct IvfInput {
  const void* keys = nullptr;    ///< device, 16-byte aligned
  const void* values = nullptr;  ///< device, 16-byte aligned, or null (shape.value_dim 0)
  int64_t seq = 0;               ///< S: tokens per head
};

/// The layout of an index of this shape (no device needed).
CUDAOPS_EXPORT Status ivf_index_size(const IvfShape& shape, IvfLayout* layout);

/// Bytes of workspace ivf_build needs (no device needed).
CUDAOPS_EXPORT Status ivf_build_workspace_size(const IvfShape& shape, const IvfInput& input,
                                               const IvfBuildParams& params, size_t* bytes);

/// Builds `index` (whose shape and buffer are set) from `input`, replacing what it held; sets
/// index->tokens and index->n_clusters. The workspace: ivf_build_workspace_size bytes, 256-byte
/// aligned, overlapping neither the index nor the input.
CUDAOPS_EXPORT Status ivf_build(const IvfInput& input, const IvfBuildParams& params,
                                IvfIndex* index, void* d_workspace, size_t workspace_bytes,
                                cudaStream_t stream);

// Extension (decoding): T new tokens per head, appended as a segment of their own clustered into
// n_clusters new clusters (spherical k-means, centred by the head's mean as built, strided
// initialisation); their positions continue the index's, their clusters follow its clusters. The
// index's capacity must hold them (nothing is reallocated), so extensions can be captured in a
// CUDA graph.

/// How to extend.
struct IvfExtendParams {
  int64_t n_clusters = 0;  ///< new clusters per head, 1 to T
  int n_iters = 10;        ///< spherical k-means iterations, >= 0
};

/// Bytes of workspace ivf_extend needs (no device needed); input.seq is T.
CUDAOPS_EXPORT Status ivf_extend_workspace_size(const IvfIndex& index, const IvfInput& input,
                                                const IvfExtendParams& params, size_t* bytes);

/// Appends input's T tokens per head ([H, T, D] keys, [H, T, value_dim] values) to `index`;
/// advances index->tokens and index->n_clusters. The workspace: ivf_extend_workspace_size bytes,
/// 256-byte aligned.
CUDAOPS_EXPORT Status ivf_extend(const IvfInput& input, const IvfExtendParams& params,
                                 IvfIndex* index, void* d_workspace, size_t workspace_bytes,
                                 cudaStream_t stream);

/// Copies the held tokens and clusters of `from` into `to`, an index buffer of another size: to
/// grow an index past its room (a buffer of larger capacity and max_clusters) or to shrink one to
/// what it holds. `to->shape` must match `from.shape` in heads, dim, value_dim and dtype and hold
/// from's tokens and clusters; `to->data` is ivf_index_size(to->shape) bytes, 256-byte aligned,
/// not overlapping `from`'s buffer. Sets to->tokens and to->n_clusters. Copies alone (no kernel):
/// the order of `stream`, no host synchronisation.
CUDAOPS_EXPORT Status ivf_copy(const IvfIndex& from, IvfIndex* to, cudaStream_t stream);

// Search: query head g reads kv head g / (Hq / H) (grouped-query attention). Each query scores
// the head's centroids (q . c with the centroids in the keys' dtype, float32 accumulation; empty
// clusters never probed), takes the n_probe best (ties to the lower cluster), scores every token
// of those clusters exactly (q . k with the keys, float32 accumulation) and returns the k best,
// best first, ties to the lower position. With fewer than k candidates the rest is (-inf, -1).
// Probing every cluster gives the exact top k.

/// Most results per query of a search.
inline constexpr int64_t kIvfMaxK = 4096;

/// How to search.
struct IvfSearchParams {
  int64_t k = 0;        ///< tokens per query, 1 to min(max_candidates, kIvfMaxK)
  int64_t n_probe = 0;  ///< clusters per query, 1 to the index's n_clusters
  /// Candidates kept per query (the workspace holds this many per query); 0: the index's tokens
  /// per head, which no probe exceeds. Only the candidates a probe finds are read, so the bound
  /// costs memory, not time; past it, the tokens of the last probed clusters (in cluster order)
  /// are dropped.
  int64_t max_candidates = 0;
};

/// Queries [Hq, Q, D] in the index's dtype, row-major, 16-byte aligned; Hq a multiple of H.
struct IvfQueries {
  const void* data = nullptr;
  int64_t q_heads = 0;
  int64_t n_queries = 0;
};

/// Bytes of workspace ivf_search needs (no device needed).
CUDAOPS_EXPORT Status ivf_search_workspace_size(const IvfIndex& index, const IvfQueries& queries,
                                                const IvfSearchParams& params, size_t* bytes);

/// The k best tokens of each query: scores [Hq, Q, k] float32 and ids [Hq, Q, k] int64 token
/// positions. The workspace: ivf_search_workspace_size bytes, 256-byte aligned.
CUDAOPS_EXPORT Status ivf_search(const IvfIndex& index, const IvfQueries& queries,
                                 const IvfSearchParams& params, float* d_scores, int64_t* d_ids,
                                 void* d_workspace, size_t workspace_bytes, cudaStream_t stream);

// Retrieval (RetroInfer): the clusters a decoding step attends to exactly, and their tokens
// gathered for an attention kernel. With `group`, one row per (kv head, query): clusters ranked
// by softmax(q . c / sqrt(D)) over the head's clusters, summed over the kv head's query heads;
// without, one row per (query head, query), ranked by q . c as the search ranks them. Either way
// with the centroids in the keys' dtype and float32 arithmetic; empty clusters never chosen. The
// chosen clusters of a row are in ascending cluster order (their tokens stay in index order),
// -1 past the non-empty clusters.

/// Which clusters a row probes.
struct IvfProbeParams {
  int64_t n_probe = 0;  ///< clusters per row, 1 to the index's n_clusters
  bool group =
      true;  ///< rows per (kv head, query), ranked over the query group; else per query head
};

/// Rows of clusters (or retrieved blocks) of `queries`: H * Q with params.group, else Hq * Q.
CUDAOPS_EXPORT Status ivf_clusters_workspace_size(const IvfIndex& index, const IvfQueries& queries,
                                                  const IvfProbeParams& params, size_t* bytes);

/// The chosen clusters: d_clusters [rows, n_probe] int32.
CUDAOPS_EXPORT Status ivf_clusters(const IvfIndex& index, const IvfQueries& queries,
                                   const IvfProbeParams& params, int32_t* d_clusters,
                                   void* d_workspace, size_t workspace_bytes, cudaStream_t stream);

/// How to retrieve.
struct IvfRetrieveParams {
  IvfProbeParams probe;
  /// Tokens per row of the blocks (their static size), >= 1. A row's tokens past it (those of its
  /// last clusters in cluster order) are dropped; n_probe times the largest cluster (which the
  /// index keeps) never drops any.
  int64_t max_tokens = 0;
};

/// Where retrieved rows go (device, 16-byte aligned): keys [rows, max_tokens, D] and values
/// [rows, max_tokens, value_dim] in the index's dtype (zero past a row's length; values null to
/// skip them, and null for an index without values), ids [rows, max_tokens] token positions (-1
/// past the length), lengths [rows].
struct IvfRetrieved {
  void* keys = nullptr;
  void* values = nullptr;
  int64_t* ids = nullptr;
  int64_t* lengths = nullptr;
};

/// Bytes of workspace ivf_retrieve needs (no device needed).
CUDAOPS_EXPORT Status ivf_retrieve_workspace_size(const IvfIndex& index, const IvfQueries& queries,
                                                  const IvfRetrieveParams& params, size_t* bytes);

/// Chooses each row's clusters as ivf_clusters does and gathers their keys, values and token
/// positions into `out`, one block per row, padded to max_tokens; no host synchronisation.
CUDAOPS_EXPORT Status ivf_retrieve(const IvfIndex& index, const IvfQueries& queries,
                                   const IvfRetrieveParams& params, const IvfRetrieved& out,
                                   void* d_workspace, size_t workspace_bytes, cudaStream_t stream);

// Decode attention over the index (docs/ivf.md): for query head g of kv head h and a query q,
// softmax(scale * q . k) v over
// - the exact zone: every token of the n_probe clusters ranked best (as ivf_clusters ranks them:
//   with `group`, per (kv head, query) over the query group; else per query head), each scored with
//   its key as the index holds it, plus the caller's extra tokens of kv head h (attention sinks,
//   recent tokens not yet indexed);
// - the estimated zone: the next n_estimate clusters of the same ranking, each standing for its
//   n_c tokens with one score scale * q . kbar_c (its mean key, in the keys' dtype) and its value
//   sum V_c: the numerator gains exp(score_c - m) * V_c, the denominator n_c * exp(score_c - m).
// Every other cluster is left out. n_probe = every cluster with n_estimate = 0 is exact attention
// over the index and the extras; clusters of one token make the estimate exact. float32
// arithmetic, the same bits every run, nothing allocated, no host synchronisation: a decoding
// loop (with ivf_extend) can be captured in a CUDA graph.

/// How to attend.
struct IvfAttentionParams {
  int64_t n_probe = 0;     ///< clusters attended exactly per row, 1 to the index's n_clusters
  int64_t n_estimate = 0;  ///< the next clusters, estimated; n_probe + n_estimate <= n_clusters
  float scale = 0.0f;      ///< of q . k, > 0; 0: 1 / sqrt(D)
  bool group = true;       ///< zones per (kv head, query) over the query group; else per head
};

/// Tokens attended exactly besides the index's, per kv head: keys [H, tokens, D] and values
/// [H, tokens, value_dim] in the index's dtype, row-major, 16-byte aligned; tokens may be 0.
struct IvfExtra {
  const void* keys = nullptr;
  const void* values = nullptr;
  int64_t tokens = 0;
};

/// Bytes of workspace ivf_attention needs (no device needed).
CUDAOPS_EXPORT Status ivf_attention_workspace_size(const IvfIndex& index, const IvfQueries& queries,
                                                   const IvfAttentionParams& params,
                                                   const IvfExtra& extra, size_t* bytes);

/// The attention of every query over the index (see above): d_out [Hq, Q, value_dim] in the
/// index's dtype and, unless null, d_lse [Hq, Q] float32, the natural log of the softmax's
/// denominator (with the scores' maximum added back), so that partial attentions merge exactly
/// (attention_merge); -inf with a zero output where nothing was attended. The index must hold
/// values. The workspace: ivf_attention_workspace_size bytes, 256-byte aligned.
CUDAOPS_EXPORT Status ivf_attention(const IvfIndex& index, const IvfQueries& queries,
                                    const IvfAttentionParams& params, const IvfExtra& extra,
                                    void* d_out, float* d_lse, void* d_workspace,
                                    size_t workspace_bytes, cudaStream_t stream);

// Files: an index's held part (its tokens and clusters, not its spare capacity) as a file of
// named arrays (docs/ivf.md): magic bytes, a major.minor version, a byte-order mark, each array's
// name, dtype, shape, offset and CRC-32. Written to a temporary file of the same directory renamed
// into place. Read only from a regular file of this user's that no one else can write, every
// checksum checked, and what the search trusts checked too (cluster ranges within the tokens and
// in order, sizes, each token id once): anything else is refused with kFileError.

/// Writes the index to `path`. Copies it to the host on `stream` and waits for that.
CUDAOPS_EXPORT Status ivf_save(const IvfIndex& index, const char* path, cudaStream_t stream);

/// The shape of the index saved at `path` (capacity: its tokens; max_clusters: its clusters).
CUDAOPS_EXPORT Status ivf_saved_shape(const char* path, IvfShape* shape);

/// Reads the index saved at `path` into `index`, whose buffer is set and whose shape has the
/// file's heads, dims and dtype and at least its tokens and clusters; sets index->tokens and
/// index->n_clusters. Copies on `stream` and waits for that.
CUDAOPS_EXPORT Status ivf_load(const char* path, IvfIndex* index, cudaStream_t stream);

}  // namespace cudaops
