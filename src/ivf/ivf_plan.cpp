// The IVF index's plan: the argument checks and layouts of its entry points, the pruned pass's plan
// and the k-means calls a build derives (declared in ivf_plan.h).
#include "ivf/ivf_plan.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <sstream>
#include <string>

#include "core/checked.h"
#include "core/validate.h"
#include "core/workspace.h"
#include "engine/kmeans_plan.h"

namespace cudaops::detail::ivf {
namespace {

/// The query rows' checks shared by the search and the retrieval: Hq a positive multiple of H,
/// Hq * Q below 2^31.
Status check_queries(const char* op, const IvfShape& s, const IvfQueries& queries, int64_t* rows) {
  if (queries.q_heads < 1 || queries.q_heads % s.heads != 0) {
    return invalid(op, "queries.q_heads (" + std::to_string(queries.q_heads) +
                           ") must be a positive multiple of the index's heads (" +
                           std::to_string(s.heads) + ")");
  }
  if (Status st = check_count(op, "queries.n_queries", queries.n_queries); !st.ok()) return st;
  if (!checked_mul(queries.q_heads, queries.n_queries, rows) ||
      *rows > std::numeric_limits<int32_t>::max()) {
    return invalid(op, "queries.q_heads * queries.n_queries must be below 2^31");
  }
  return Status();
}

}  // namespace

Status invalid(const char* op, const std::string& text) {
  return Status(StatusCode::kInvalidArgument, std::string(op) + ": " + text);
}

Status check_shape(const char* op, const IvfShape& s) {
  if (s.dtype != DType::kFloat16 && s.dtype != DType::kBFloat16) {
    std::ostringstream text;
    text << op << ": shape.dtype " << dtype_name(s.dtype)
         << " is not supported; expected float16 or bfloat16";
    return Status(StatusCode::kUnsupportedDtype, text.str());
  }
  if (s.heads < 1) return invalid(op, "shape.heads must be >= 1, got " + std::to_string(s.heads));
  if (s.dim < 8 || s.dim > kMaxDim || s.dim % 8 != 0) {
    return invalid(op, "shape.dim must be a multiple of 8 from 8 to " + std::to_string(kMaxDim) +
                           ", got " + std::to_string(s.dim));
  }
  if (s.value_dim < 0 || s.value_dim > kMaxDim || s.value_dim % 8 != 0) {
    return invalid(op, "shape.value_dim must be 0 or a multiple of 8 up to " +
                           std::to_string(kMaxDim) + ", got " + std::to_string(s.value_dim));
  }
  if (s.capacity < 1 || s.capacity > std::numeric_limits<int32_t>::max()) {
    return invalid(op,
                   "shape.capacity must be from 1 to 2^31 - 1, got " + std::to_string(s.capacity));
  }
  if (s.max_clusters < 1 || s.max_clusters > kMaxClusters) {
    return invalid(op, "shape.max_clusters must be from 1 to " + std::to_string(kMaxClusters) +
                           ", got " + std::to_string(s.max_clusters));
  }
  return Status();
}

Status layout_of(const char* op, const IvfShape& s, IvfLayout* l) {
  if (Status st = check_shape(op, s); !st.ok()) return st;
  const int64_t e = 2;  // float16 and bfloat16
  WorkspaceCarver p;
  l->means = p.add({s.heads, s.dim, 4});
  l->centroids = p.add({s.heads, s.max_clusters, s.dim, 4});
  l->centroids_lp = p.add({s.heads, s.max_clusters, s.dim, e});
  l->offsets = p.add({s.heads, s.max_clusters + 1, 8});
  l->sizes = p.add({s.heads, s.max_clusters, 4});
  l->ids = p.add({s.heads, s.capacity, 4});
  l->keys = p.add({s.heads, s.capacity, s.dim, e});
  l->values = p.add({s.heads, s.capacity, s.value_dim, e});
  l->value_sums = p.add({s.heads, s.max_clusters, s.value_dim, 4});
  l->key_means = p.add({s.heads, s.max_clusters, s.dim, e});
  l->largest = p.add({4});
  l->bytes = p.bytes();
  if (p.overflow()) return invalid(op, "the index's size overflows");
  return Status();
}

Status check_params(const char* op, const IvfShape& s, int64_t seq, const IvfBuildParams& params) {
  if (seq < 1 || seq > s.capacity) {
    return invalid(op, "input.seq must be from 1 to shape.capacity (" + std::to_string(s.capacity) +
                           "), got " + std::to_string(seq));
  }
  if (params.n_segments < 1 || params.n_segments > seq) {
    return invalid(op, "params.n_segments must be from 1 to input.seq (" + std::to_string(seq) +
                           "), got " + std::to_string(params.n_segments));
  }
  if (params.n_clusters < 1 || params.n_clusters % params.n_segments != 0) {
    return invalid(op, "params.n_clusters (" + std::to_string(params.n_clusters) +
                           ") must be a positive multiple of params.n_segments (" +
                           std::to_string(params.n_segments) + ")");
  }
  if (params.n_clusters > s.max_clusters) {
    return invalid(op, "params.n_clusters (" + std::to_string(params.n_clusters) +
                           ") is above shape.max_clusters (" + std::to_string(s.max_clusters) +
                           ")");
  }
  const int64_t per_segment = params.n_clusters / params.n_segments;
  const int64_t shortest = seq / params.n_segments;
  if (per_segment > shortest) {
    return invalid(op, "params.n_clusters / params.n_segments (" + std::to_string(per_segment) +
                           ") is above the shortest segment's tokens (" + std::to_string(shortest) +
                           ")");
  }
  if (params.n_iters < 0) {
    return invalid(op, "params.n_iters must be >= 0, got " + std::to_string(params.n_iters));
  }
  int64_t rows = 0;
  if (!checked_mul(s.heads, seq, &rows) || rows > std::numeric_limits<int32_t>::max()) {
    return invalid(op, "shape.heads * input.seq must be below 2^31");
  }
  return Status();
}

Status build_layout(const char* op, const IvfShape& s, int64_t seq, const IvfBuildParams& params,
                    BuildLayout* l) {
  const int64_t problems = s.heads * params.n_segments;  // <= heads * seq, checked
  WorkspaceCarver p;
  l->mean_parts = p.add({s.heads, kMeanParts, s.dim, 4});
  l->seg_offsets = p.add({problems + 1, 8});
  l->centroids = p.add({s.heads, params.n_clusters, s.dim, 4});
  l->labels = p.add({s.heads, seq, 4});
  l->counts = p.add({s.heads, params.n_clusters, 4});
  l->starts = p.add({s.heads, params.n_clusters, 4});
  l->perm = p.add({s.heads, seq, 4});
  if (p.overflow()) return invalid(op, "the workspace size overflows");
  // k-means over the segments, then the global assignment, one after the other in one piece.
  size_t fit = 0, assign = 0;
  // Given means take no workspace: the query is that of the same call without them.
  if (Status st = kmeans_workspace_size(
          segment_points(s, nullptr, seq, params.n_segments, nullptr),
          segment_params(params.n_clusters / params.n_segments, params.n_iters, nullptr), &fit);
      !st.ok()) {
    return st;
  }
  KmeansCentroids centroids;
  centroids.n_clusters = params.n_clusters;
  if (Status st = kmeans_assign_workspace_size(head_points(s, nullptr, seq), centroids,
                                               KmeansMetric::kCosine, &assign);
      !st.ok()) {
    return st;
  }
  l->kmeans_bytes = std::max(fit, assign);
  const PrunePlan plan = prune_plan(s, params);
  if (plan.on) {
    size_t groups = 0, grouping = 0;
    if (Status st = kmeans_workspace_size(group_points(s, nullptr, params.n_clusters, true),
                                          group_params(plan), &groups);
        !st.ok()) {
      return st;
    }
    if (Status st = kmeans_assign_workspace_size(group_points(s, nullptr, params.n_clusters, false),
                                                 group_centroids(plan, nullptr),
                                                 KmeansMetric::kCosine, &grouping);
        !st.ok()) {
      return st;
    }
    l->kmeans_bytes = std::max({l->kmeans_bytes, groups, grouping});
    const int64_t g = plan.groups, c = params.n_clusters, e = dtype_size(s.dtype);
    l->group_centroids = p.add({s.heads, g, s.dim, 4});
    l->group_labels = p.add({s.heads, c, 4});
    l->group_counts = p.add({s.heads, g, 4});
    l->group_starts = p.add({s.heads, g, 4});
    l->grouped = p.add({s.heads, c, 4});
    l->position = p.add({s.heads, c, 4});
    l->chunk_of = p.add({s.heads, c, 4});
    l->chunk_first = p.add({s.heads, g + 1, 4});
    l->operand = p.add({s.heads, plan.chunk_slots, 64, plan.d_pad, e});
    l->column = p.add({s.heads, plan.chunk_slots, 64, 4});
    l->chunk_means = p.add({s.heads, plan.mean_rows, plan.d_pad, e});
    l->radius = p.add({s.heads, plan.mean_rows, 4});
  }
  l->kmeans = p.add({static_cast<int64_t>(l->kmeans_bytes)});
  l->bytes = p.bytes();
  if (p.overflow()) return invalid(op, "the workspace size overflows");
  return Status();
}

Status check_held(const char* op, const IvfIndex& index) {
  if (index.tokens < 1 || index.tokens > index.shape.capacity || index.n_clusters < 1 ||
      index.n_clusters > index.shape.max_clusters) {
    return invalid(op, "index holds " + std::to_string(index.tokens) + " tokens in " +
                           std::to_string(index.n_clusters) +
                           " clusters per head; expected a built index");
  }
  return Status();
}

Status extend_layout(const char* op, const IvfIndex& index, const IvfInput& input,
                     const IvfExtendParams& params, ExtendLayout* l) {
  const IvfShape& s = index.shape;
  if (Status st = layout_of(op, s, &l->index); !st.ok()) return st;
  if (Status st = check_held(op, index); !st.ok()) return st;
  if (input.seq < 1 || input.seq > s.capacity - index.tokens) {
    return invalid(op, "input.seq must be from 1 to the index's room (" +
                           std::to_string(s.capacity - index.tokens) + " of capacity " +
                           std::to_string(s.capacity) + "), got " + std::to_string(input.seq));
  }
  if (params.n_clusters < 1 || params.n_clusters > input.seq ||
      params.n_clusters > s.max_clusters - index.n_clusters) {
    return invalid(op, "params.n_clusters must be from 1 to min(input.seq (" +
                           std::to_string(input.seq) + "), the index's room for clusters (" +
                           std::to_string(s.max_clusters - index.n_clusters) + ")), got " +
                           std::to_string(params.n_clusters));
  }
  if (params.n_iters < 0) {
    return invalid(op, "params.n_iters must be >= 0, got " + std::to_string(params.n_iters));
  }
  WorkspaceCarver p;
  l->centroids = p.add({s.heads, params.n_clusters, s.dim, 4});
  l->labels = p.add({s.heads, input.seq, 4});
  l->counts = p.add({s.heads, params.n_clusters, 4});
  l->starts = p.add({s.heads, params.n_clusters, 4});
  l->perm = p.add({s.heads, input.seq, 4});
  l->done = p.add({s.heads, 4});
  if (p.overflow()) return invalid(op, "the workspace size overflows");
  size_t fit = 0;
  if (Status st =
          kmeans_workspace_size(head_points(s, nullptr, input.seq),
                                segment_params(params.n_clusters, params.n_iters, nullptr), &fit);
      !st.ok()) {
    return st;
  }
  l->kmeans_bytes = fit;
  l->kmeans = p.add({static_cast<int64_t>(fit)});
  l->bytes = p.bytes();
  if (p.overflow()) return invalid(op, "the workspace size overflows");
  return Status();
}

namespace {

/// What every call with queries checks first: the index's shape (its layout into *layout), that
/// it is built, the query rows (*rows = Hq * Q) and n_probe (named `probe_name`).
Status check_query_call(const char* op, const IvfIndex& index, const IvfQueries& queries,
                        const char* probe_name, int64_t n_probe, IvfLayout* layout, int64_t* rows) {
  if (Status st = layout_of(op, index.shape, layout); !st.ok()) return st;
  if (Status st = check_held(op, index); !st.ok()) return st;
  if (Status st = check_queries(op, index.shape, queries, rows); !st.ok()) return st;
  if (n_probe < 1 || n_probe > index.n_clusters) {
    return invalid(op, std::string(probe_name) + " must be from 1 to the index's clusters (" +
                           std::to_string(index.n_clusters) + "), got " + std::to_string(n_probe));
  }
  return Status();
}

}  // namespace

Status search_layout(const char* op, const IvfIndex& index, const IvfQueries& queries,
                     const IvfSearchParams& params, int64_t* max_candidates, SearchLayout* l) {
  int64_t rows = 0;
  if (Status st =
          check_query_call(op, index, queries, "params.n_probe", params.n_probe, &l->index, &rows);
      !st.ok()) {
    return st;
  }
  if (params.max_candidates < 0) {
    return invalid(
        op, "params.max_candidates must be >= 0, got " + std::to_string(params.max_candidates));
  }
  const int64_t m = params.max_candidates > 0 ? params.max_candidates : index.tokens;
  if (params.k < 1 || params.k > m || params.k > kIvfMaxK) {
    return invalid(op, "params.k must be from 1 to min(max_candidates (" + std::to_string(m) +
                           "), " + std::to_string(kIvfMaxK) + "), got " + std::to_string(params.k));
  }
  WorkspaceCarver p;
  l->cluster_scores = p.add({rows, index.n_clusters, 4});
  l->probes = p.add({rows, params.n_probe, 4});
  l->starts = p.add({rows, params.n_probe, 8});
  l->places = p.add({rows, params.n_probe + 1, 8});
  l->candidates = p.add({rows, m, 8});
  l->lengths = p.add({rows, 8});
  l->bytes = p.bytes();
  if (p.overflow()) return invalid(op, "the workspace size overflows");
  *max_candidates = m;
  return Status();
}

Status attention_layout(const char* op, const IvfIndex& index, const IvfQueries& queries,
                        const IvfAttentionParams& params, const IvfExtra& extra,
                        AttentionLayout* l) {
  const IvfShape& s = index.shape;
  int64_t query_rows = 0;
  if (Status st = check_query_call(op, index, queries, "params.n_probe", params.n_probe, &l->index,
                                   &query_rows);
      !st.ok()) {
    return st;
  }
  if (params.n_estimate < 0 || params.n_estimate > index.n_clusters - params.n_probe) {
    return invalid(op, "params.n_estimate must be from 0 to the index's clusters less n_probe (" +
                           std::to_string(index.n_clusters - params.n_probe) + "), got " +
                           std::to_string(params.n_estimate));
  }
  if (!(params.scale >= 0.0f) || std::isinf(params.scale)) {
    return invalid(op, "params.scale must be finite and > 0 (0: 1 / sqrt(dim)), got " +
                           std::to_string(params.scale));
  }
  if (s.value_dim == 0) return invalid(op, "the index holds no values to attend to");
  if (extra.tokens < 0 || extra.tokens > std::numeric_limits<int32_t>::max()) {
    return invalid(op,
                   "extra.tokens must be from 0 to 2^31 - 1, got " + std::to_string(extra.tokens));
  }
  const int64_t q_group = s.heads > 0 ? queries.q_heads / s.heads : 0;
  l->rows = params.group ? s.heads * queries.n_queries : query_rows;
  l->row_heads = params.group ? q_group : 1;
  const int64_t head_blocks = (l->row_heads + kAttentionHeads - 1) / kAttentionHeads;
  const int64_t row_blocks = std::max<int64_t>(l->rows * head_blocks, 1);
  l->splits = std::clamp<int64_t>((kAttentionTargetBlocks + row_blocks - 1) / row_blocks, 1,
                                  kAttentionMaxSplits);
  const int64_t wide = params.n_probe + params.n_estimate;
  WorkspaceCarver p;
  l->cluster_scores = p.add({query_rows, index.n_clusters, 4});
  if (params.group) {
    l->stats = p.add({query_rows, 2, 4});
    l->group_scores = p.add({l->rows, index.n_clusters, 4});
  }
  l->probes = p.add({l->rows, params.n_probe, 4});
  l->starts = p.add({l->rows, params.n_probe, 8});
  l->places = p.add({l->rows, params.n_probe + 1, 8});
  l->lengths = p.add({l->rows, 8});
  if (params.n_estimate > 0) {
    l->wide_probes = p.add({l->rows, wide, 4});
    l->wide_starts = p.add({l->rows, wide, 8});
    l->wide_places = p.add({l->rows, wide + 1, 8});
    l->wide_lengths = p.add({l->rows, 8});
  }
  l->partial_ml = p.add({l->rows, l->row_heads, l->splits, 2, 4});
  l->partial_acc = p.add({l->rows, l->row_heads, l->splits, s.value_dim, 4});
  l->bytes = p.bytes();
  if (p.overflow()) return invalid(op, "the workspace size overflows");
  return Status();
}

Status probe_layout(const char* op, const IvfIndex& index, const IvfQueries& queries,
                    const IvfProbeParams& params, int64_t max_tokens, bool retrieve, int64_t* rows,
                    ProbeLayout* l) {
  const IvfShape& s = index.shape;
  int64_t query_rows = 0;
  if (Status st =
          check_query_call(op, index, queries, retrieve ? "params.probe.n_probe" : "params.n_probe",
                           params.n_probe, &l->index, &query_rows);
      !st.ok()) {
    return st;
  }
  if (retrieve && max_tokens < 1) {
    return invalid(op, "params.max_tokens must be >= 1, got " + std::to_string(max_tokens));
  }
  *rows = params.group ? s.heads * queries.n_queries : query_rows;
  // The retrieved blocks' sizes, here so that the size query refuses what the call refuses.
  int64_t places = 0, key_elems = 0, value_elems = 0;
  if (retrieve &&
      (!checked_mul(*rows, max_tokens, &places) || !checked_mul(places, s.dim, &key_elems) ||
       !checked_mul(places, s.value_dim, &value_elems) ||
       key_elems > std::numeric_limits<int64_t>::max() / 8)) {
    return invalid(op, "rows * params.max_tokens * dim overflows");
  }
  WorkspaceCarver p;
  l->cluster_scores = p.add({query_rows, index.n_clusters, 4});
  if (params.group) {
    l->stats = p.add({query_rows, 2, 4});
    l->group_scores = p.add({*rows, index.n_clusters, 4});
  }
  if (retrieve) l->probes = p.add({*rows, params.n_probe, 4});
  l->starts = p.add({*rows, params.n_probe, 8});
  l->places = p.add({*rows, params.n_probe + 1, 8});
  if (!retrieve) l->lengths = p.add({*rows, 8});
  l->bytes = p.bytes();
  if (p.overflow()) return invalid(op, "the workspace size overflows");
  return Status();
}

Status check_index_data(const char* op, const IvfIndex& index, const char* name) {
  if (index.data == nullptr) return invalid(op, std::string(name) + " must not be null");
  if (reinterpret_cast<uintptr_t>(index.data) % 256 != 0) {
    return Status(StatusCode::kMisaligned,
                  std::string(op) + ": " + name + " must be 256-byte aligned");
  }
  return Status();
}

Status check_probe_memory(const char* op, const IvfIndex& index, const IvfQueries& queries) {
  if (Status st = check_index_data(op, index, "index.data"); !st.ok()) return st;
  if (queries.data == nullptr) return invalid(op, "queries.data must not be null");
  if (reinterpret_cast<uintptr_t>(queries.data) % 16 != 0) {
    return Status(StatusCode::kMisaligned,
                  std::string(op) + ": queries.data must be 16-byte aligned");
  }
  return Status();
}

Status check_workspace(const char* op, const char* query, void* workspace, size_t bytes,
                       size_t needed) {
  if (bytes < needed) {
    std::ostringstream text;
    text << op << ": workspace_bytes " << bytes << " is below the " << needed << " bytes " << query
         << " gives";
    return Status(StatusCode::kWorkspaceTooSmall, text.str());
  }
  if (workspace == nullptr) return invalid(op, "d_workspace must not be null");
  if (reinterpret_cast<uintptr_t>(workspace) % 256 != 0) {
    return Status(StatusCode::kMisaligned,
                  std::string(op) + ": d_workspace must be 256-byte aligned");
  }
  return Status();
}

Status check_input_memory(const char* op, const IvfIndex& index, const IvfInput& input,
                          size_t index_bytes, void* workspace, size_t workspace_bytes,
                          size_t needed, const char* query) {
  const IvfShape& shape = index.shape;
  const std::string o(op);
  if (Status st = check_index_data(op, index, "index->data"); !st.ok()) return st;
  if (input.keys == nullptr) return invalid(op, "input.keys must not be null");
  if (reinterpret_cast<uintptr_t>(input.keys) % 16 != 0) {
    return Status(StatusCode::kMisaligned, o + ": input.keys must be 16-byte aligned");
  }
  if ((input.values == nullptr) != (shape.value_dim == 0)) {
    return invalid(op, shape.value_dim == 0 ? "input.values must be null: shape.value_dim is 0"
                                            : "input.values must not be null: shape.value_dim is " +
                                                  std::to_string(shape.value_dim));
  }
  if (input.values != nullptr && reinterpret_cast<uintptr_t>(input.values) % 16 != 0) {
    return Status(StatusCode::kMisaligned, o + ": input.values must be 16-byte aligned");
  }
  if (Status st = check_workspace(op, query, workspace, workspace_bytes, needed); !st.ok()) {
    return st;
  }
  const size_t key_bytes = static_cast<size_t>(shape.heads * input.seq * shape.dim) * 2;
  const size_t value_bytes = static_cast<size_t>(shape.heads * input.seq * shape.value_dim) * 2;
  return check_overlaps(op, {byte_region("input.keys", input.keys, key_bytes, false),
                             byte_region("input.values", input.values, value_bytes, false),
                             byte_region("index->data", index.data, index_bytes, true),
                             byte_region("d_workspace", workspace, needed, true)});
}

Status check_built(const char* op, const IvfIndex& index, IvfLayout* layout) {
  if (Status s = layout_of(op, index.shape, layout); !s.ok()) return s;
  if (Status st = check_held(op, index); !st.ok()) return st;
  return check_index_data(op, index, "index.data");
}

QueryCall query_call(const IvfIndex& index, const IvfLayout& layout, const IvfQueries& queries,
                     void* workspace) {
  QueryCall call;
  call.shape = index.shape;
  call.index = layout;
  call.buffer = static_cast<const unsigned char*>(index.data);
  call.n_clusters = index.n_clusters;
  call.queries = queries.data;
  call.q_heads = queries.q_heads;
  call.n_queries = queries.n_queries;
  call.workspace = static_cast<unsigned char*>(workspace);
  return call;
}

KmeansPoints segment_points(const IvfShape& shape, const void* keys, int64_t seq,
                            int64_t n_segments, const int64_t* offsets) {
  KmeansPoints p;
  p.data = keys;
  p.dtype = shape.dtype;
  p.batch = shape.heads * n_segments;
  p.n = (seq + n_segments - 1) / n_segments;  // the longest segment
  p.d = shape.dim;
  p.ld = shape.dim;
  // The offsets live on the device; a size query gives any non-null pointer.
  p.offsets = offsets != nullptr ? offsets : reinterpret_cast<const int64_t*>(alignof(int64_t));
  return p;
}

KmeansPoints head_points(const IvfShape& shape, const void* keys, int64_t seq) {
  KmeansPoints p;
  p.data = keys;
  p.dtype = shape.dtype;
  p.batch = shape.heads;
  p.n = seq;
  p.d = shape.dim;
  p.ld = shape.dim;
  p.batch_stride = seq * shape.dim;
  return p;
}

PrunePlan prune_plan(const IvfShape& shape, const IvfBuildParams& params) {
  PrunePlan plan;
  // Below 4096 clusters the grouping costs about what the pass saves (8 x 32768 tokens into
  // 2048: 2.42 ms pruned, 2.18 dense); CUDAOPS_IVF_PRUNE=all prunes from 64 clusters on (the
  // tests' small shapes). Float32 k-means (of the centroids) takes 256 dimensions.
  static const int64_t fewest = [] {
    const char* value = std::getenv("CUDAOPS_IVF_PRUNE");
    return value != nullptr && std::strcmp(value, "all") == 0 ? int64_t{64} : int64_t{4096};
  }();
  if (!params.global_pass || !params.prune || params.n_clusters < fewest || shape.dim > 256) {
    return plan;
  }
  plan.on = true;
  // Groups of about 128 centroids: two chunks of 64 each.
  plan.groups = static_cast<int>(std::clamp<int64_t>(params.n_clusters / 128, 2, 256));
  plan.d_pad = kmeans::padded_dims(shape.dim, dtype_size(shape.dtype));
  // A group of n centroids takes ceil(n / 64) chunks: at most C / 64 + G in all (<= 764).
  plan.chunk_slots = (params.n_clusters + 63 * plan.groups + 63) / 64;
  plan.mean_rows = (plan.chunk_slots + 63) / 64 * 64;
  return plan;
}

KmeansPoints group_points(const IvfShape& shape, const float* centroids, int64_t n_clusters,
                          bool sample) {
  KmeansPoints p;
  p.data = centroids;
  p.dtype = DType::kFloat32;
  p.batch = shape.heads;
  p.n = sample ? n_clusters / kGroupSample : n_clusters;  // >= 16 (C >= 64), >= 4 G
  p.d = shape.dim;
  p.ld = sample ? kGroupSample * shape.dim : shape.dim;
  p.batch_stride = n_clusters * shape.dim;
  return p;
}

KmeansCentroids group_centroids(const PrunePlan& plan, const float* centroids) {
  KmeansCentroids c;
  c.data = centroids;
  c.dtype = DType::kFloat32;
  c.n_clusters = plan.groups;
  return c;
}

KmeansParams group_params(const PrunePlan& plan) {
  KmeansParams params;
  params.n_clusters = plan.groups;
  params.n_iters = 5;
  params.metric = KmeansMetric::kCosine;
  params.init = KmeansInit::kStrided;
  return params;
}

KmeansParams segment_params(int64_t per_segment, int n_iters, const float* means) {
  KmeansParams params;
  params.n_clusters = per_segment;
  params.n_iters = n_iters;
  params.metric = KmeansMetric::kCosine;
  params.init = KmeansInit::kStrided;
  params.means = means;
  return params;
}

}  // namespace cudaops::detail::ivf
