#pragma once

// The IVF index over attention KV caches: how each call is laid out (host only, so that the sizes
// need no device), the argument checks its entry points share (ivf_plan.cpp), and the typed launch
// entry points, built one dtype per translation unit (ivf_<stage>_<dtype>.cu).
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "cudaops/ivf.h"
#include "cudaops/kmeans.h"
#include "cudaops/status.h"

namespace cudaops::detail::ivf {

/// Most clusters per head (k-means' largest problem).
inline constexpr int64_t kMaxClusters = kIvfMaxClusters;
/// Most dimensions of keys and values.
inline constexpr int64_t kMaxDim = 512;

/// Row ranges of a head whose column sums its mean adds in order (so that every SM reads keys).
inline constexpr int kMeanParts = 64;

/// The pruned global pass's sizes (ivf_prune.cuh): whether it runs, the centroids' groups, the
/// chunks of 64 centroids a head's layout holds and its chunk means' rows (rounded up to 64).
struct PrunePlan {
  bool on = false;
  int groups = 0;
  int64_t d_pad = 0;
  int64_t chunk_slots = 0;
  int64_t mean_rows = 0;
};
PrunePlan prune_plan(const IvfShape& shape, const IvfBuildParams& params);
/// Every kGroupSample-th centroid of each head is fitted into the plan's groups, then every
/// centroid assigned to them: the groups steer only how much the pass skips, not its labels.
inline constexpr int64_t kGroupSample = 4;
/// Each head's centroids ([H, C, D] float32) as k-means points: all, or (sample) every
/// kGroupSample-th.
KmeansPoints group_points(const IvfShape& shape, const float* centroids, int64_t n_clusters,
                          bool sample);
KmeansParams group_params(const PrunePlan& plan);
KmeansCentroids group_centroids(const PrunePlan& plan, const float* centroids);

/// The workspace of a build, every piece 256-byte aligned (byte offsets).
struct BuildLayout {
  size_t mean_parts = 0;   // [H, kMeanParts, D] float32: column sums of each head's row ranges
  size_t seg_offsets = 0;  // [H * n_segments + 1] int64: each segment's first row of [H * S, D]
  size_t centroids = 0;    // [H, C, D] float32: the segments' centroids, head by head
  size_t labels = 0;       // [H * S] int32
  size_t counts = 0;       // [H, C] int32
  size_t starts = 0;       // [H, C] int32
  size_t perm = 0;         // [H, S] int32: each head's tokens in cluster order
  size_t kmeans = 0;       // k-means' workspace, then kmeans_assign's
  size_t kmeans_bytes = 0;
  // The pruned pass (PrunePlan::on), G groups, N chunk slots, M mean rows, P = d_pad:
  size_t group_centroids = 0;  // [H, G, D] float32
  size_t group_labels = 0;     // [H, C] int32: each centroid's group
  size_t group_counts = 0;     // [H, G] int32
  size_t group_starts = 0;     // [H, G] int32
  size_t grouped = 0;          // [H, C] int32: the centroids in group order
  size_t position = 0;         // [H, C] int32: each centroid's place in that order
  size_t chunk_of = 0;         // [H, C] int32: the chunk of each place
  size_t chunk_first = 0;      // [H, G + 1] int32
  size_t operand = 0;          // [H, N * 64, P] keys' dtype
  size_t column = 0;           // [H, N * 64] int32
  size_t chunk_means = 0;      // [H, M, P] keys' dtype
  size_t radius = 0;           // [H, M] float32
  size_t bytes = 0;
};

/// Everything a typed build needs, every size checked.
struct BuildCall {
  IvfShape shape;
  IvfLayout index;  // of shape
  int64_t seq = 0;
  int64_t n_clusters = 0;  // C, per head
  int64_t n_segments = 0;
  int64_t per_segment = 0;  // C / n_segments
  int n_iters = 0;
  bool global_pass = true;
  PrunePlan prune;
  const void* keys = nullptr;
  const void* values = nullptr;
  unsigned char* buffer = nullptr;  // the index's
  unsigned char* workspace = nullptr;
  BuildLayout layout;
};

/// The piece at `offset` of a buffer (a workspace's or an index's), as P.
template <typename P>
P* at(unsigned char* base, size_t offset) {
  return reinterpret_cast<P*>(base + offset);
}

/// The global pass pruned (ivf_prune.cuh, ivf_prune_<dtype>.cu), where call.prune.on: labels
/// holds each token's cluster in its head (the segments' fit) on entry, the pass's on return;
/// the workspace's counts, starts and perm are overwritten.
template <typename T>
Status pruned_pass(const BuildCall& call, const T* centred, const float* centroids, int32_t* labels,
                   cudaStream_t stream);

/// The k-means points of the segments: rows of [H * S, D] by offsets.
KmeansPoints segment_points(const IvfShape& shape, const void* keys, int64_t seq,
                            int64_t n_segments, const int64_t* offsets);
/// The keys as a strided batch of H problems of S rows.
KmeansPoints head_points(const IvfShape& shape, const void* keys, int64_t seq);
KmeansParams segment_params(int64_t per_segment, int n_iters, const float* means);

template <typename T>
Status launch_build(const BuildCall& call, cudaStream_t stream);

/// Each cluster's mean key (index.key_means) of clusters [first, first + count) of every head,
/// from the keys in cluster order (ivf_means.cuh): after a build, an extension or a load.
template <typename T>
Status launch_key_means(const char* op, const IvfShape& s, const IvfLayout& index,
                        unsigned char* buffer, int64_t first, int64_t count, cudaStream_t stream);

/// The workspace of an extension (byte offsets, each 256-byte aligned); T new tokens per head
/// into c new clusters.
struct ExtendLayout {
  IvfLayout index;       // the index's buffer
  size_t centroids = 0;  // [H, c, D] float32
  size_t labels = 0;     // [H, T] int32
  size_t counts = 0;     // [H, c] int32
  size_t starts = 0;     // [H, c] int32
  size_t perm = 0;       // [H, T] int32
  size_t done = 0;       // [H] int32: the blocks of each head's k-means that wrote its results
  size_t kmeans = 0;
  size_t kmeans_bytes = 0;
  size_t bytes = 0;
};

struct ExtendCall {
  IvfShape shape;
  IvfLayout index;
  unsigned char* buffer = nullptr;
  int64_t tokens = 0, n_clusters = 0;  // held before the call
  int64_t seq = 0, n_new = 0;          // new tokens and clusters per head
  int n_iters = 0;
  const void* keys = nullptr;
  const void* values = nullptr;
  unsigned char* workspace = nullptr;
  ExtendLayout layout;
};

template <typename T>
Status launch_extend(const ExtendCall& call, cudaStream_t stream);

/// The workspace of a search (byte offsets, each 256-byte aligned); R = Hq * Q query rows.
struct SearchLayout {
  IvfLayout index;            // the index's buffer
  size_t cluster_scores = 0;  // [R, C] float32
  size_t probes = 0;          // [R, n_probe] int32, ascending, -1 past the non-empty clusters
  size_t starts = 0;          // [R, n_probe] int64: each probe's first token in its head
  size_t places = 0;          // [R, n_probe + 1] int64: its first place in the row's list
  size_t candidates = 0;      // [R, M] uint64: score's rank key above, complement of the id below
  size_t lengths = 0;         // [R] int64: candidates per row
  size_t bytes = 0;
};

/// What every call with queries against a built index carries (search, clusters, retrieval).
struct QueryCall {
  IvfShape shape;
  IvfLayout index;
  const unsigned char* buffer = nullptr;  // the index's
  int64_t n_clusters = 0;                 // held per head
  const void* queries = nullptr;
  int64_t q_heads = 0, n_queries = 0;
  unsigned char* workspace = nullptr;
};

/// The QueryCall of `index` (laid out as `layout`) and `queries`, with `workspace`.
QueryCall query_call(const IvfIndex& index, const IvfLayout& layout, const IvfQueries& queries,
                     void* workspace);

struct SearchCall : QueryCall {
  int64_t k = 0, n_probe = 0, max_candidates = 0;
  float* scores = nullptr;
  int64_t* ids = nullptr;
  SearchLayout layout;
};

template <typename T>
Status launch_search(const SearchCall& call, cudaStream_t stream);

/// The workspace of ivf_clusters or ivf_retrieve (byte offsets, each 256-byte aligned); Rq =
/// Hq * Q query rows, R rows of the result (H * Q with group, else Rq).
struct ProbeLayout {
  IvfLayout index;            // the index's buffer
  size_t cluster_scores = 0;  // [Rq, C] float32
  size_t stats = 0;           // [Rq, 2] float32: the largest score, 1 / the softmax's sum (group)
  size_t group_scores = 0;    // [R, C] float32: softmax weights summed over the group (group)
  size_t probes = 0;          // [R, n_probe] int32 (retrieve)
  size_t starts = 0;          // [R, n_probe] int64
  size_t places = 0;          // [R, n_probe + 1] int64
  size_t lengths = 0;         // [R] int64 (clusters)
  size_t bytes = 0;
};

struct ProbeCall : QueryCall {
  int64_t n_probe = 0;
  bool group = true;
  int64_t max_tokens = 0;       // the retrieved blocks' rows (clusters: the index's tokens)
  int32_t* clusters = nullptr;  // ivf_clusters' output; null for a retrieval
  IvfRetrieved out;             // a retrieval's outputs
  ProbeLayout layout;
};

template <typename T>
Status launch_probe(const ProbeCall& call, cudaStream_t stream);

/// Query heads of a row one block of the decode attention takes (sharing each key and value load).
inline constexpr int64_t kAttentionHeads = 4;
/// Blocks the decode attention's split aims for (about two per SM of an H100); each row's work is
/// split evenly over ceil(this / row blocks) blocks, at most kAttentionMaxSplits.
inline constexpr int64_t kAttentionTargetBlocks = 264;
inline constexpr int64_t kAttentionMaxSplits = 64;

/// The workspace of a decode attention (byte offsets, each 256-byte aligned); Rq = Hq * Q query
/// rows, R = H * Q rows with `group` (each of the group's Hq / H heads), else Rq (one head each).
struct AttentionLayout {
  IvfLayout index;
  int64_t rows = 0;           // R
  int64_t row_heads = 0;      // query heads a row holds
  int64_t splits = 0;         // blocks of a row's work (and of its heads' parts)
  size_t cluster_scores = 0;  // [Rq, C] float32
  size_t stats = 0;           // [Rq, 2] (group)
  size_t group_scores = 0;    // [R, C] (group)
  size_t probes = 0;          // [R, n_probe] int32: the exact zone
  size_t starts = 0;          // [R, n_probe] int64
  size_t places = 0;          // [R, n_probe + 1] int64
  size_t lengths = 0;         // [R] int64
  size_t wide_probes = 0;     // [R, n_probe + n_estimate] int32: both zones (n_estimate > 0)
  size_t wide_starts = 0;     // as starts, places and lengths, of both zones
  size_t wide_places = 0;
  size_t wide_lengths = 0;
  size_t partial_ml = 0;   // [R, row_heads, splits, 2] float32
  size_t partial_acc = 0;  // [R, row_heads, splits, Dv] float32
  size_t bytes = 0;
};

struct AttentionCall : QueryCall {
  int64_t tokens = 0;  // held per head
  int64_t n_probe = 0;
  int64_t n_estimate = 0;
  float scale = 0.0f;
  bool group = true;
  IvfExtra extra;
  void* out = nullptr;   // [Hq, Q, Dv] in the index's dtype
  float* lse = nullptr;  // [Hq, Q] or null
  AttentionLayout layout;
};

template <typename T>
Status launch_attention(const AttentionCall& call, cudaStream_t stream);

// ---- the argument checks and layouts of the entry points (ivf_plan.cpp); each returns a status
// naming `op` and the argument.
Status invalid(const char* op, const std::string& text);

Status check_shape(const char* op, const IvfShape& s);
/// The shape checked and laid out.
Status layout_of(const char* op, const IvfShape& s, IvfLayout* l);
Status check_params(const char* op, const IvfShape& s, int64_t seq, const IvfBuildParams& params);
Status build_layout(const char* op, const IvfShape& s, int64_t seq, const IvfBuildParams& params,
                    BuildLayout* l);
/// An index that holds tokens and clusters within its capacity (as ivf_build leaves it).
Status check_held(const char* op, const IvfIndex& index);
/// The extension's sizes: every argument but the memory checked, the workspace laid out.
Status extend_layout(const char* op, const IvfIndex& index, const IvfInput& input,
                     const IvfExtendParams& params, ExtendLayout* l);
/// The search's sizes: every argument but the memory checked, the workspace laid out.
Status search_layout(const char* op, const IvfIndex& index, const IvfQueries& queries,
                     const IvfSearchParams& params, int64_t* max_candidates, SearchLayout* l);
/// The sizes of a decode attention: every argument but the memory checked, the workspace laid out.
Status attention_layout(const char* op, const IvfIndex& index, const IvfQueries& queries,
                        const IvfAttentionParams& params, const IvfExtra& extra,
                        AttentionLayout* l);
/// The sizes of ivf_clusters (max_tokens 0) or ivf_retrieve: every argument but the memory
/// checked, the workspace laid out; *rows the result's rows.
Status probe_layout(const char* op, const IvfIndex& index, const IvfQueries& queries,
                    const IvfProbeParams& params, int64_t max_tokens, bool retrieve, int64_t* rows,
                    ProbeLayout* l);

/// index.data (called `name` in messages) set and 256-byte aligned.
Status check_index_data(const char* op, const IvfIndex& index, const char* name);
/// The index's and the queries' pointers of a search, clusters or retrieval call.
Status check_probe_memory(const char* op, const IvfIndex& index, const IvfQueries& queries);
/// `bytes` of workspace at least `needed` (as the size query `query` gives), set and aligned.
Status check_workspace(const char* op, const char* query, void* workspace, size_t bytes,
                       size_t needed);
/// The memory of a build or an extension: the index's buffer, the input's keys and values, the
/// workspace (`needed` bytes, as `query` gives), none overlapping another that is written.
Status check_input_memory(const char* op, const IvfIndex& index, const IvfInput& input,
                          size_t index_bytes, void* workspace, size_t workspace_bytes,
                          size_t needed, const char* query);
/// A built index's layout and pointer (save).
Status check_built(const char* op, const IvfIndex& index, IvfLayout* layout);

}  // namespace cudaops::detail::ivf
