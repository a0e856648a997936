// The IVF index's search, clusters and retrieval: the public entry points check every argument
// (ivf_plan.h) and pick the keys' dtype (ivf_search_<dtype>.cu).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <limits>
#include <string>
#include <utility>

#include "core/checked.h"
#include "core/validate.h"
#include "cudaops/ivf.h"
#include "ivf/ivf_plan.h"

namespace cudaops {
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
    return detail::ivf::invalid(kOp,
                                "rows * params.max_tokens * dim overflows");  // (as probe_layout)
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

}  // namespace cudaops
