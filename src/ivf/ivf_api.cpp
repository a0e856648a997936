// The IVF index: the public entry points check every argument, lay out the index buffer and the
// build's workspace, and pick the keys' dtype (ivf_build_<dtype>.cu).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "core/checked.h"
#include "core/launch.h"
#include "core/validate.h"
#include "cudaops/ivf.h"
#include "cudaops/topk.h"
#include "ivf/ivf_file.h"
#include "ivf/ivf_plan.h"

namespace cudaops {
namespace detail::ivf {
namespace {

Status invalid(const char* op, const std::string& text) {
  return Status(StatusCode::kInvalidArgument, std::string(op) + ": " + text);
}

/// Pieces of a buffer, each 256-byte aligned; `overflow` once a size does not fit.
struct Pieces {
  size_t offset = 0;
  bool overflow = false;
  size_t add(std::initializer_list<int64_t> factors) {
    int64_t bytes = 0;
    if (!checked_product(factors, &bytes) ||
        static_cast<uint64_t>(bytes) > std::numeric_limits<uint64_t>::max() / 4 - offset) {
      overflow = true;
      return 0;
    }
    const size_t at = offset;
    offset += (static_cast<size_t>(bytes) + 255) / 256 * 256;
    return at;
  }
};

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
  Pieces p;
  l->means = p.add({s.heads, s.dim, 4});
  l->centroids = p.add({s.heads, s.max_clusters, s.dim, 4});
  l->centroids_lp = p.add({s.heads, s.max_clusters, s.dim, e});
  l->offsets = p.add({s.heads, s.max_clusters + 1, 8});
  l->sizes = p.add({s.heads, s.max_clusters, 4});
  l->ids = p.add({s.heads, s.capacity, 4});
  l->keys = p.add({s.heads, s.capacity, s.dim, e});
  l->values = p.add({s.heads, s.capacity, s.value_dim, e});
  l->value_sums = p.add({s.heads, s.max_clusters, s.value_dim, 4});
  l->largest = p.add({4});
  l->bytes = p.offset;
  if (p.overflow) return invalid(op, "the index's size overflows");
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
  Pieces p;
  l->seg_offsets = p.add({problems + 1, 8});
  l->seg_means = p.add({problems, s.dim, 4});
  l->centroids = p.add({s.heads, params.n_clusters, s.dim, 4});
  l->labels = p.add({s.heads, seq, 4});
  l->counts = p.add({s.heads, params.n_clusters, 4});
  l->starts = p.add({s.heads, params.n_clusters, 4});
  l->perm = p.add({s.heads, seq, 4});
  if (p.overflow) return invalid(op, "the workspace size overflows");
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
  l->kmeans = p.add({static_cast<int64_t>(l->kmeans_bytes)});
  l->bytes = p.offset;
  if (p.overflow) return invalid(op, "the workspace size overflows");
  return Status();
}

/// An index that holds tokens and clusters within its capacity (as ivf_build leaves it).
Status check_held(const char* op, const IvfIndex& index) {
  if (index.tokens < 1 || index.tokens > index.shape.capacity || index.n_clusters < 1 ||
      index.n_clusters > index.shape.max_clusters) {
    return invalid(op, "index holds " + std::to_string(index.tokens) + " tokens in " +
                           std::to_string(index.n_clusters) +
                           " clusters per head; expected a built index");
  }
  return Status();
}

/// The extension's sizes: every argument but the memory checked, the workspace laid out.
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
  Pieces p;
  l->centroids = p.add({s.heads, params.n_clusters, s.dim, 4});
  l->labels = p.add({s.heads, input.seq, 4});
  l->counts = p.add({s.heads, params.n_clusters, 4});
  l->starts = p.add({s.heads, params.n_clusters, 4});
  l->perm = p.add({s.heads, input.seq, 4});
  if (p.overflow) return invalid(op, "the workspace size overflows");
  size_t fit = 0;
  if (Status st =
          kmeans_workspace_size(head_points(s, nullptr, input.seq),
                                segment_params(params.n_clusters, params.n_iters, nullptr), &fit);
      !st.ok()) {
    return st;
  }
  l->kmeans_bytes = fit;
  l->kmeans = p.add({static_cast<int64_t>(fit)});
  l->bytes = p.offset;
  if (p.overflow) return invalid(op, "the workspace size overflows");
  return Status();
}

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

/// The search's sizes: every argument but the memory checked, the workspace laid out.
Status search_layout(const char* op, const IvfIndex& index, const IvfQueries& queries,
                     const IvfSearchParams& params, int64_t* max_candidates, SearchLayout* l) {
  const IvfShape& s = index.shape;
  if (Status st = layout_of(op, s, &l->index); !st.ok()) return st;
  if (Status st = check_held(op, index); !st.ok()) return st;
  int64_t rows = 0;
  if (Status st = check_queries(op, s, queries, &rows); !st.ok()) return st;
  if (params.n_probe < 1 || params.n_probe > index.n_clusters) {
    return invalid(op, "params.n_probe must be from 1 to the index's clusters (" +
                           std::to_string(index.n_clusters) + "), got " +
                           std::to_string(params.n_probe));
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
  Pieces p;
  l->cluster_scores = p.add({rows, index.n_clusters, 4});
  l->probes = p.add({rows, params.n_probe, 4});
  l->starts = p.add({rows, params.n_probe, 8});
  l->places = p.add({rows, params.n_probe + 1, 8});
  l->candidates = p.add({rows, m, 8});
  l->lengths = p.add({rows, 8});
  l->bytes = p.offset;
  if (p.overflow) return invalid(op, "the workspace size overflows");
  *max_candidates = m;
  return Status();
}

/// The sizes of ivf_clusters (max_tokens 0) or ivf_retrieve: every argument but the memory
/// checked, the workspace laid out; *rows the result's rows.
Status probe_layout(const char* op, const IvfIndex& index, const IvfQueries& queries,
                    const IvfProbeParams& params, int64_t max_tokens, bool retrieve, int64_t* rows,
                    ProbeLayout* l) {
  const IvfShape& s = index.shape;
  if (Status st = layout_of(op, s, &l->index); !st.ok()) return st;
  if (Status st = check_held(op, index); !st.ok()) return st;
  int64_t query_rows = 0;
  if (Status st = check_queries(op, s, queries, &query_rows); !st.ok()) return st;
  if (params.n_probe < 1 || params.n_probe > index.n_clusters) {
    return invalid(op, std::string(retrieve ? "params.probe.n_probe" : "params.n_probe") +
                           " must be from 1 to the index's clusters (" +
                           std::to_string(index.n_clusters) + "), got " +
                           std::to_string(params.n_probe));
  }
  if (retrieve && max_tokens < 1) {
    return invalid(op, "params.max_tokens must be >= 1, got " + std::to_string(max_tokens));
  }
  *rows = params.group ? s.heads * queries.n_queries : query_rows;
  Pieces p;
  l->cluster_scores = p.add({query_rows, index.n_clusters, 4});
  if (params.group) {
    l->stats = p.add({query_rows, 2, 4});
    l->group_scores = p.add({*rows, index.n_clusters, 4});
  }
  if (retrieve) l->probes = p.add({*rows, params.n_probe, 4});
  l->starts = p.add({*rows, params.n_probe, 8});
  l->places = p.add({*rows, params.n_probe + 1, 8});
  if (!retrieve) l->lengths = p.add({*rows, 8});
  l->bytes = p.offset;
  if (p.overflow) return invalid(op, "the workspace size overflows");
  return Status();
}

}  // namespace

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

namespace {

/// The index's and the queries' pointers of a search, clusters or retrieval call.
Status check_probe_memory(const char* op, const IvfIndex& index, const IvfQueries& queries) {
  if (index.data == nullptr) return invalid(op, "index.data must not be null");
  if (reinterpret_cast<uintptr_t>(index.data) % 256 != 0) {
    return Status(StatusCode::kMisaligned,
                  std::string(op) + ": index.data must be 256-byte aligned");
  }
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

/// The memory of a build or an extension: the index's buffer, the input's keys and values, the
/// workspace (`needed` bytes, as `query` gives), none overlapping another that is written.
Status check_input_memory(const char* op, const IvfIndex& index, const IvfInput& input,
                          size_t index_bytes, void* workspace, size_t workspace_bytes,
                          size_t needed, const char* query) {
  const IvfShape& shape = index.shape;
  const std::string o(op);
  if (index.data == nullptr) return invalid(op, "index->data must not be null");
  if (reinterpret_cast<uintptr_t>(index.data) % 256 != 0) {
    return Status(StatusCode::kMisaligned, o + ": index->data must be 256-byte aligned");
  }
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
  if (workspace_bytes < needed) {
    std::ostringstream text;
    text << op << ": workspace_bytes " << workspace_bytes << " is below the " << needed << " bytes "
         << query << " gives";
    return Status(StatusCode::kWorkspaceTooSmall, text.str());
  }
  if (workspace == nullptr) return invalid(op, "d_workspace must not be null");
  if (reinterpret_cast<uintptr_t>(workspace) % 256 != 0) {
    return Status(StatusCode::kMisaligned, o + ": d_workspace must be 256-byte aligned");
  }
  const size_t key_bytes = static_cast<size_t>(shape.heads * input.seq * shape.dim) * 2;
  const size_t value_bytes = static_cast<size_t>(shape.heads * input.seq * shape.value_dim) * 2;
  return check_overlaps(op, {byte_region("input.keys", input.keys, key_bytes, false),
                             byte_region("input.values", input.values, value_bytes, false),
                             byte_region("index->data", index.data, index_bytes, true),
                             byte_region("d_workspace", workspace, needed, true)});
}

}  // namespace

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

KmeansParams segment_params(int64_t per_segment, int n_iters, const float* means) {
  KmeansParams params;
  params.n_clusters = per_segment;
  params.n_iters = n_iters;
  params.metric = KmeansMetric::kCosine;
  params.init = KmeansInit::kStrided;
  params.means = means;
  return params;
}

}  // namespace detail::ivf

using detail::ivf::BuildCall;
using detail::ivf::BuildLayout;

Status ivf_index_size(const IvfShape& shape, IvfLayout* layout) {
  constexpr const char* kOp = "ivf_index_size";
  if (layout == nullptr) return detail::ivf::invalid(kOp, "layout must not be null");
  IvfLayout l;
  if (Status s = detail::ivf::layout_of(kOp, shape, &l); !s.ok()) return s;
  *layout = l;
  return Status();
}

Status ivf_build_workspace_size(const IvfShape& shape, const IvfInput& input,
                                const IvfBuildParams& params, size_t* bytes) {
  constexpr const char* kOp = "ivf_build_workspace_size";
  if (bytes == nullptr) return detail::ivf::invalid(kOp, "bytes must not be null");
  if (Status s = detail::ivf::check_shape(kOp, shape); !s.ok()) return s;
  if (Status s = detail::ivf::check_params(kOp, shape, input.seq, params); !s.ok()) return s;
  BuildLayout l;
  if (Status s = detail::ivf::build_layout(kOp, shape, input.seq, params, &l); !s.ok()) return s;
  *bytes = l.bytes;
  return Status();
}

Status ivf_build(const IvfInput& input, const IvfBuildParams& params, IvfIndex* index,
                 void* d_workspace, size_t workspace_bytes, cudaStream_t stream) {
  constexpr const char* kOp = "ivf_build";
  if (index == nullptr) return detail::ivf::invalid(kOp, "index must not be null");
  const IvfShape& shape = index->shape;
  IvfLayout layout;
  if (Status s = detail::ivf::layout_of(kOp, shape, &layout); !s.ok()) return s;
  if (Status s = detail::ivf::check_params(kOp, shape, input.seq, params); !s.ok()) return s;
  BuildLayout ws;
  if (Status s = detail::ivf::build_layout(kOp, shape, input.seq, params, &ws); !s.ok()) return s;
  if (Status s =
          detail::ivf::check_input_memory(kOp, *index, input, layout.bytes, d_workspace,
                                          workspace_bytes, ws.bytes, "ivf_build_workspace_size");
      !s.ok())
    return s;

  BuildCall call;
  call.shape = shape;
  call.index = layout;
  call.seq = input.seq;
  call.n_clusters = params.n_clusters;
  call.n_segments = params.n_segments;
  call.per_segment = params.n_clusters / params.n_segments;
  call.n_iters = params.n_iters;
  call.global_pass = params.global_pass;
  call.keys = input.keys;
  call.values = input.values;
  call.buffer = static_cast<unsigned char*>(index->data);
  call.workspace = static_cast<unsigned char*>(d_workspace);
  call.layout = ws;
  Status s = shape.dtype == DType::kFloat16
                 ? detail::ivf::launch_build<__half>(call, stream)
                 : detail::ivf::launch_build<__nv_bfloat16>(call, stream);
  if (s.ok()) {
    index->tokens = input.seq;
    index->n_clusters = params.n_clusters;
  }
  return s;
}

Status ivf_search_workspace_size(const IvfIndex& index, const IvfQueries& queries,
                                 const IvfSearchParams& params, size_t* bytes) {
  constexpr const char* kOp = "ivf_search_workspace_size";
  if (bytes == nullptr) return detail::ivf::invalid(kOp, "bytes must not be null");
  detail::ivf::SearchLayout l;
  int64_t m = 0;
  if (Status s = detail::ivf::search_layout(kOp, index, queries, params, &m, &l); !s.ok()) {
    return s;
  }
  *bytes = l.bytes;
  return Status();
}

Status ivf_search(const IvfIndex& index, const IvfQueries& queries, const IvfSearchParams& params,
                  float* d_scores, int64_t* d_ids, void* d_workspace, size_t workspace_bytes,
                  cudaStream_t stream) {
  constexpr const char* kOp = "ivf_search";
  detail::ivf::SearchLayout l;
  int64_t m = 0;
  if (Status s = detail::ivf::search_layout(kOp, index, queries, params, &m, &l); !s.ok()) {
    return s;
  }
  const IvfLayout& layout = l.index;
  const int64_t rows = queries.q_heads * queries.n_queries;
  if (rows == 0) return Status();
  if (Status s = detail::ivf::check_probe_memory(kOp, index, queries); !s.ok()) return s;
  const int64_t results = rows * params.k;
  if (Status s = detail::check_pointer(kOp, "d_scores", d_scores, results, DType::kFloat32);
      !s.ok())
    return s;
  if (Status s = detail::check_pointer(kOp, "d_ids", d_ids, results, DType::kInt64); !s.ok()) {
    return s;
  }
  if (Status s = detail::ivf::check_workspace(kOp, "ivf_search_workspace_size", d_workspace,
                                              workspace_bytes, l.bytes);
      !s.ok()) {
    return s;
  }
  const size_t query_bytes = static_cast<size_t>(rows * index.shape.dim) * 2;
  if (Status s = detail::check_overlaps(
          kOp, {detail::byte_region("queries.data", queries.data, query_bytes, false),
                detail::byte_region("index.data", index.data, layout.bytes, false),
                detail::byte_region("d_scores", d_scores, static_cast<size_t>(results) * 4, true),
                detail::byte_region("d_ids", d_ids, static_cast<size_t>(results) * 8, true),
                detail::byte_region("d_workspace", d_workspace, l.bytes, true)});
      !s.ok())
    return s;
  detail::ivf::SearchCall call;
  static_cast<detail::ivf::QueryCall&>(call) =
      detail::ivf::query_call(index, layout, queries, d_workspace);
  call.k = params.k;
  call.n_probe = params.n_probe;
  call.max_candidates = m;
  call.scores = d_scores;
  call.ids = d_ids;
  call.layout = l;
  return index.shape.dtype == DType::kFloat16
             ? detail::ivf::launch_search<__half>(call, stream)
             : detail::ivf::launch_search<__nv_bfloat16>(call, stream);
}

namespace detail::ivf {
namespace {

ProbeCall probe_call(const IvfIndex& index, const IvfQueries& queries, const IvfProbeParams& params,
                     const ProbeLayout& l, void* workspace) {
  ProbeCall call;
  static_cast<QueryCall&>(call) = query_call(index, l.index, queries, workspace);
  call.n_probe = params.n_probe;
  call.group = params.group;
  call.layout = l;
  return call;
}

Status run_probe(const ProbeCall& call, cudaStream_t stream) {
  return call.shape.dtype == DType::kFloat16 ? launch_probe<__half>(call, stream)
                                             : launch_probe<__nv_bfloat16>(call, stream);
}

}  // namespace
}  // namespace detail::ivf

Status ivf_clusters_workspace_size(const IvfIndex& index, const IvfQueries& queries,
                                   const IvfProbeParams& params, size_t* bytes) {
  constexpr const char* kOp = "ivf_clusters_workspace_size";
  if (bytes == nullptr) return detail::ivf::invalid(kOp, "bytes must not be null");
  detail::ivf::ProbeLayout l;
  int64_t rows = 0;
  if (Status s = detail::ivf::probe_layout(kOp, index, queries, params, 0, false, &rows, &l);
      !s.ok()) {
    return s;
  }
  *bytes = l.bytes;
  return Status();
}

Status ivf_clusters(const IvfIndex& index, const IvfQueries& queries, const IvfProbeParams& params,
                    int32_t* d_clusters, void* d_workspace, size_t workspace_bytes,
                    cudaStream_t stream) {
  constexpr const char* kOp = "ivf_clusters";
  detail::ivf::ProbeLayout l;
  int64_t rows = 0;
  if (Status s = detail::ivf::probe_layout(kOp, index, queries, params, 0, false, &rows, &l);
      !s.ok()) {
    return s;
  }
  if (rows == 0) return Status();
  if (Status s = detail::ivf::check_probe_memory(kOp, index, queries); !s.ok()) return s;
  const int64_t results = rows * params.n_probe;
  if (Status s = detail::check_pointer(kOp, "d_clusters", d_clusters, results, DType::kInt32);
      !s.ok()) {
    return s;
  }
  if (Status s = detail::ivf::check_workspace(kOp, "ivf_clusters_workspace_size", d_workspace,
                                              workspace_bytes, l.bytes);
      !s.ok()) {
    return s;
  }
  const size_t query_bytes =
      static_cast<size_t>(queries.q_heads * queries.n_queries * index.shape.dim) * 2;
  if (Status s = detail::check_overlaps(
          kOp,
          {detail::byte_region("queries.data", queries.data, query_bytes, false),
           detail::byte_region("index.data", index.data, l.index.bytes, false),
           detail::byte_region("d_clusters", d_clusters, static_cast<size_t>(results) * 4, true),
           detail::byte_region("d_workspace", d_workspace, l.bytes, true)});
      !s.ok())
    return s;
  detail::ivf::ProbeCall call = detail::ivf::probe_call(index, queries, params, l, d_workspace);
  call.max_tokens = index.tokens;
  call.clusters = d_clusters;
  return detail::ivf::run_probe(call, stream);
}

Status ivf_retrieve_workspace_size(const IvfIndex& index, const IvfQueries& queries,
                                   const IvfRetrieveParams& params, size_t* bytes) {
  constexpr const char* kOp = "ivf_retrieve_workspace_size";
  if (bytes == nullptr) return detail::ivf::invalid(kOp, "bytes must not be null");
  detail::ivf::ProbeLayout l;
  int64_t rows = 0;
  if (Status s = detail::ivf::probe_layout(kOp, index, queries, params.probe, params.max_tokens,
                                           true, &rows, &l);
      !s.ok()) {
    return s;
  }
  *bytes = l.bytes;
  return Status();
}

Status ivf_retrieve(const IvfIndex& index, const IvfQueries& queries,
                    const IvfRetrieveParams& params, const IvfRetrieved& out, void* d_workspace,
                    size_t workspace_bytes, cudaStream_t stream) {
  constexpr const char* kOp = "ivf_retrieve";
  detail::ivf::ProbeLayout l;
  int64_t rows = 0;
  if (Status s = detail::ivf::probe_layout(kOp, index, queries, params.probe, params.max_tokens,
                                           true, &rows, &l);
      !s.ok()) {
    return s;
  }
  if (rows == 0) return Status();
  if (Status s = detail::ivf::check_probe_memory(kOp, index, queries); !s.ok()) return s;
  const IvfShape& sh = index.shape;
  int64_t places = 0, key_elems = 0, value_elems = 0;
  if (!detail::checked_mul(rows, params.max_tokens, &places) ||
      !detail::checked_mul(places, sh.dim, &key_elems) ||
      !detail::checked_mul(places, sh.value_dim, &value_elems) ||
      key_elems > std::numeric_limits<int64_t>::max() / 8) {
    return detail::ivf::invalid(kOp, "rows * params.max_tokens * dim overflows");
  }
  if (Status s = detail::check_pointer(kOp, "out.keys", out.keys, key_elems, sh.dtype); !s.ok()) {
    return s;
  }
  if (sh.value_dim == 0 && out.values != nullptr) {
    return detail::ivf::invalid(kOp, "out.values must be null: the index holds no values");
  }
  if (out.values != nullptr) {
    if (Status s = detail::check_pointer(kOp, "out.values", out.values, value_elems, sh.dtype);
        !s.ok()) {
      return s;
    }
  }
  if (Status s = detail::check_pointer(kOp, "out.ids", out.ids, places, DType::kInt64); !s.ok()) {
    return s;
  }
  if (Status s = detail::check_pointer(kOp, "out.lengths", out.lengths, rows, DType::kInt64);
      !s.ok()) {
    return s;
  }
  for (const auto& [name, p] :
       {std::pair<const char*, const void*>{"out.keys", out.keys}, {"out.values", out.values}}) {
    if (p != nullptr && reinterpret_cast<uintptr_t>(p) % 16 != 0) {
      return Status(StatusCode::kMisaligned,
                    std::string(kOp) + ": " + name + " must be 16-byte aligned");
    }
  }
  if (Status s = detail::ivf::check_workspace(kOp, "ivf_retrieve_workspace_size", d_workspace,
                                              workspace_bytes, l.bytes);
      !s.ok()) {
    return s;
  }
  const size_t query_bytes = static_cast<size_t>(queries.q_heads * queries.n_queries * sh.dim) * 2;
  if (Status s = detail::check_overlaps(
          kOp,
          {detail::byte_region("queries.data", queries.data, query_bytes, false),
           detail::byte_region("index.data", index.data, l.index.bytes, false),
           detail::byte_region("out.keys", out.keys, static_cast<size_t>(key_elems) * 2, true),
           detail::byte_region("out.values", out.values, static_cast<size_t>(value_elems) * 2,
                               true),
           detail::byte_region("out.ids", out.ids, static_cast<size_t>(places) * 8, true),
           detail::byte_region("out.lengths", out.lengths, static_cast<size_t>(rows) * 8, true),
           detail::byte_region("d_workspace", d_workspace, l.bytes, true)});
      !s.ok())
    return s;
  detail::ivf::ProbeCall call =
      detail::ivf::probe_call(index, queries, params.probe, l, d_workspace);
  call.max_tokens = params.max_tokens;
  call.out = out;
  return detail::ivf::run_probe(call, stream);
}

namespace detail::ivf {
namespace {

/// `rows` rows of `width` bytes, `src_pitch` bytes apart, to rows `dst_pitch` bytes apart.
cudaError_t copy_rows(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t width,
                      int64_t rows, cudaMemcpyKind kind, cudaStream_t stream) {
  if (width == 0 || rows == 0) return cudaSuccess;
  return cudaMemcpy2DAsync(dst, dst_pitch, src, src_pitch, width, static_cast<size_t>(rows), kind,
                           stream);
}

Status check_built(const char* op, const IvfIndex& index, IvfLayout* layout) {
  if (Status s = layout_of(op, index.shape, layout); !s.ok()) return s;
  if (Status st = check_held(op, index); !st.ok()) return st;
  if (index.data == nullptr) return invalid(op, "index.data must not be null");
  if (reinterpret_cast<uintptr_t>(index.data) % 256 != 0) {
    return Status(StatusCode::kMisaligned,
                  std::string(op) + ": index.data must be 256-byte aligned");
  }
  return Status();
}

}  // namespace
}  // namespace detail::ivf

Status ivf_save(const IvfIndex& index, const char* path, cudaStream_t stream) {
  constexpr const char* kOp = "ivf_save";
  IvfLayout l;
  if (Status s = detail::ivf::check_built(kOp, index, &l); !s.ok()) return s;
  if (path == nullptr || *path == 0) return detail::ivf::invalid(kOp, "path must not be empty");
  const IvfShape& s = index.shape;
  IvfShape held = s;
  held.capacity = index.tokens;
  held.max_clusters = index.n_clusters;
  detail::ivf::HostIndex x;
  if (Status st = x.allocate(held, kOp); !st.ok()) return st;
  const auto* base = static_cast<const unsigned char*>(index.data);
  const int64_t h = s.heads, c = index.n_clusters, n = index.tokens;
  const size_t cm = static_cast<size_t>(s.max_clusters), cap = static_cast<size_t>(s.capacity);
  const size_t d = static_cast<size_t>(s.dim), dv = static_cast<size_t>(s.value_dim);
  const size_t cc = static_cast<size_t>(c), nn = static_cast<size_t>(n);
  const cudaMemcpyKind down = cudaMemcpyDeviceToHost;
  cudaError_t e =
      detail::ivf::copy_rows(x.means.data(), d * 4, base + l.means, d * 4, d * 4, h, down, stream);
  const struct {
    void* dst;
    size_t offset, pitch, width;
  } pieces[] = {
      {x.centroids.data(), l.centroids, cm * d * 4, cc * d * 4},
      {x.centroids_lp.data(), l.centroids_lp, cm * d * 2, cc * d * 2},
      {x.offsets.data(), l.offsets, (cm + 1) * 8, (cc + 1) * 8},
      {x.sizes.data(), l.sizes, cm * 4, cc * 4},
      {x.ids.data(), l.ids, cap * 4, nn * 4},
      {x.keys.data(), l.keys, cap * d * 2, nn * d * 2},
      {x.values.data(), l.values, cap * dv * 2, nn * dv * 2},
      {x.value_sums.data(), l.value_sums, cm * dv * 4, cc * dv * 4},
  };
  for (const auto& p : pieces) {
    if (e == cudaSuccess)
      e = detail::ivf::copy_rows(p.dst, p.width, base + p.offset, p.pitch, p.width, h, down,
                                 stream);
  }
  if (e == cudaSuccess) e = cudaMemcpyAsync(&x.largest, base + l.largest, 4, down, stream);
  if (e == cudaSuccess) e = cudaStreamSynchronize(stream);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    return detail::cuda_status(e, kOp, "copying the index to the host");
  }
  return detail::ivf::write_index_file(x, path, kOp);
}

Status ivf_saved_shape(const char* path, IvfShape* shape) {
  constexpr const char* kOp = "ivf_saved_shape";
  if (path == nullptr || *path == 0) return detail::ivf::invalid(kOp, "path must not be empty");
  if (shape == nullptr) return detail::ivf::invalid(kOp, "shape must not be null");
  return detail::ivf::read_index_shape(path, kOp, shape);
}

Status ivf_load(const char* path, IvfIndex* index, cudaStream_t stream) {
  constexpr const char* kOp = "ivf_load";
  if (path == nullptr || *path == 0) return detail::ivf::invalid(kOp, "path must not be empty");
  if (index == nullptr) return detail::ivf::invalid(kOp, "index must not be null");
  IvfLayout l;
  if (Status st = detail::ivf::layout_of(kOp, index->shape, &l); !st.ok()) return st;
  if (index->data == nullptr) return detail::ivf::invalid(kOp, "index->data must not be null");
  if (reinterpret_cast<uintptr_t>(index->data) % 256 != 0) {
    return Status(StatusCode::kMisaligned, "ivf_load: index->data must be 256-byte aligned");
  }
  detail::ivf::HostIndex x;
  if (Status st = detail::ivf::read_index_file(path, kOp, &x); !st.ok()) return st;
  const IvfShape& f = x.shape;
  const IvfShape& s = index->shape;
  if (f.heads != s.heads || f.dim != s.dim || f.value_dim != s.value_dim || f.dtype != s.dtype ||
      f.capacity > s.capacity || f.max_clusters > s.max_clusters) {
    std::ostringstream text;
    text << kOp << ": the file holds " << f.heads << " heads of " << f.capacity << " tokens in "
         << f.max_clusters << " clusters, dim " << f.dim << ", value_dim " << f.value_dim << ", "
         << dtype_name(f.dtype)
         << "; index->shape must have the same heads, dims and dtype and room for them";
    return Status(StatusCode::kInvalidArgument, text.str());
  }
  const int64_t h = s.heads, c = f.max_clusters, n = f.capacity;
  const size_t cm = static_cast<size_t>(s.max_clusters), cap = static_cast<size_t>(s.capacity);
  const size_t d = static_cast<size_t>(s.dim), dv = static_cast<size_t>(s.value_dim);
  const size_t cc = static_cast<size_t>(c), nn = static_cast<size_t>(n);
  // The per-cluster arrays at the buffer's stride, the slots past the file's clusters empty.
  std::vector<float> centroids(static_cast<size_t>(h) * cm * d, 0.0f);
  std::vector<uint16_t> centroids_lp(static_cast<size_t>(h) * cm * d, 0);
  std::vector<int64_t> offsets(static_cast<size_t>(h) * (cm + 1), n);
  std::vector<int32_t> sizes(static_cast<size_t>(h) * cm, 0);
  std::vector<float> value_sums(static_cast<size_t>(h) * cm * dv, 0.0f);
  for (size_t hh = 0; hh < static_cast<size_t>(h); ++hh) {
    std::copy_n(x.centroids.begin() + hh * cc * d, cc * d, centroids.begin() + hh * cm * d);
    std::copy_n(x.centroids_lp.begin() + hh * cc * d, cc * d, centroids_lp.begin() + hh * cm * d);
    std::copy_n(x.offsets.begin() + hh * (cc + 1), cc + 1, offsets.begin() + hh * (cm + 1));
    std::copy_n(x.sizes.begin() + hh * cc, cc, sizes.begin() + hh * cm);
    std::copy_n(x.value_sums.begin() + hh * cc * dv, cc * dv, value_sums.begin() + hh * cm * dv);
  }
  auto* base = static_cast<unsigned char*>(index->data);
  const cudaMemcpyKind up = cudaMemcpyHostToDevice;
  const struct {
    size_t offset;
    const void* src;
    size_t bytes;
  } whole[] = {{l.means, x.means.data(), x.means.size() * 4},
               {l.centroids, centroids.data(), centroids.size() * 4},
               {l.centroids_lp, centroids_lp.data(), centroids_lp.size() * 2},
               {l.offsets, offsets.data(), offsets.size() * 8},
               {l.sizes, sizes.data(), sizes.size() * 4},
               {l.value_sums, value_sums.data(), value_sums.size() * 4},
               {l.largest, &x.largest, 4}};
  cudaError_t e = cudaSuccess;
  for (const auto& w : whole) {
    if (e == cudaSuccess && w.bytes > 0)
      e = cudaMemcpyAsync(base + w.offset, w.src, w.bytes, up, stream);
  }
  const struct {
    size_t offset;
    const void* src;
    size_t pitch, width;
  } rows[] = {{l.ids, x.ids.data(), cap * 4, nn * 4},
              {l.keys, x.keys.data(), cap * d * 2, nn * d * 2},
              {l.values, x.values.data(), cap * dv * 2, nn * dv * 2}};
  for (const auto& r : rows) {
    if (e == cudaSuccess) {
      e = detail::ivf::copy_rows(base + r.offset, r.pitch, r.src, r.width, r.width, h, up, stream);
    }
  }
  if (e == cudaSuccess) e = cudaStreamSynchronize(stream);  // the host copies go out of scope
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    return detail::cuda_status(e, kOp, "copying the index to the device");
  }
  index->tokens = n;
  index->n_clusters = c;
  return Status();
}

Status ivf_extend_workspace_size(const IvfIndex& index, const IvfInput& input,
                                 const IvfExtendParams& params, size_t* bytes) {
  constexpr const char* kOp = "ivf_extend_workspace_size";
  if (bytes == nullptr) return detail::ivf::invalid(kOp, "bytes must not be null");
  detail::ivf::ExtendLayout l;
  if (Status s = detail::ivf::extend_layout(kOp, index, input, params, &l); !s.ok()) return s;
  *bytes = l.bytes;
  return Status();
}

Status ivf_extend(const IvfInput& input, const IvfExtendParams& params, IvfIndex* index,
                  void* d_workspace, size_t workspace_bytes, cudaStream_t stream) {
  constexpr const char* kOp = "ivf_extend";
  if (index == nullptr) return detail::ivf::invalid(kOp, "index must not be null");
  detail::ivf::ExtendLayout l;
  if (Status s = detail::ivf::extend_layout(kOp, *index, input, params, &l); !s.ok()) return s;
  const IvfLayout& layout = l.index;
  const IvfShape& shape = index->shape;
  if (Status s =
          detail::ivf::check_input_memory(kOp, *index, input, layout.bytes, d_workspace,
                                          workspace_bytes, l.bytes, "ivf_extend_workspace_size");
      !s.ok())
    return s;
  detail::ivf::ExtendCall call;
  call.shape = shape;
  call.index = layout;
  call.buffer = static_cast<unsigned char*>(index->data);
  call.tokens = index->tokens;
  call.n_clusters = index->n_clusters;
  call.seq = input.seq;
  call.n_new = params.n_clusters;
  call.n_iters = params.n_iters;
  call.keys = input.keys;
  call.values = input.values;
  call.workspace = static_cast<unsigned char*>(d_workspace);
  call.layout = l;
  Status s = shape.dtype == DType::kFloat16
                 ? detail::ivf::launch_extend<__half>(call, stream)
                 : detail::ivf::launch_extend<__nv_bfloat16>(call, stream);
  if (s.ok()) {
    index->tokens += input.seq;
    index->n_clusters += params.n_clusters;
  }
  return s;
}

}  // namespace cudaops
