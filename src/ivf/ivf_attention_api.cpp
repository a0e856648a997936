// The IVF index's decode attention: the public entry points check every argument (ivf_plan.h)
// and pick the keys' dtype (ivf_attention_<dtype>.cu).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <tuple>

#include "core/checked.h"
#include "core/validate.h"
#include "cudaops/ivf.h"
#include "ivf/ivf_plan.h"

namespace cudaops {

Status ivf_attention_workspace_size(const IvfIndex& index, const IvfQueries& queries,
                                    const IvfAttentionParams& params, const IvfExtra& extra,
                                    size_t* bytes) {
  constexpr const char* kOp = "ivf_attention_workspace_size";
  if (bytes == nullptr) return detail::ivf::invalid(kOp, "bytes must not be null");
  detail::ivf::AttentionLayout l;
  if (Status s = detail::ivf::attention_layout(kOp, index, queries, params, extra, &l); !s.ok()) {
    return s;
  }
  *bytes = l.bytes;
  return Status();
}

Status ivf_attention(const IvfIndex& index, const IvfQueries& queries,
                     const IvfAttentionParams& params, const IvfExtra& extra, void* d_out,
                     float* d_lse, void* d_workspace, size_t workspace_bytes, cudaStream_t stream) {
  constexpr const char* kOp = "ivf_attention";
  detail::ivf::AttentionLayout l;
  if (Status s = detail::ivf::attention_layout(kOp, index, queries, params, extra, &l); !s.ok()) {
    return s;
  }
  const int64_t query_rows = queries.q_heads * queries.n_queries;
  if (query_rows == 0) return Status();
  const IvfShape& sh = index.shape;
  if (Status s = detail::ivf::check_probe_memory(kOp, index, queries); !s.ok()) return s;
  int64_t out_elems = 0, extra_keys = 0, extra_values = 0;
  if (!detail::checked_mul(query_rows, sh.value_dim, &out_elems) ||
      !detail::checked_product({sh.heads, extra.tokens, sh.dim}, &extra_keys) ||
      !detail::checked_product({sh.heads, extra.tokens, sh.value_dim}, &extra_values)) {
    return detail::ivf::invalid(kOp, "the outputs' or the extras' size overflows");
  }
  if (Status s = detail::check_pointer(kOp, "d_out", d_out, out_elems, sh.dtype); !s.ok()) {
    return s;
  }
  if (reinterpret_cast<uintptr_t>(d_out) % 16 != 0) {
    return Status(StatusCode::kMisaligned, std::string(kOp) + ": d_out must be 16-byte aligned");
  }
  if (d_lse != nullptr) {
    if (Status s = detail::check_pointer(kOp, "d_lse", d_lse, query_rows, DType::kFloat32);
        !s.ok()) {
      return s;
    }
  }
  if (extra.tokens > 0) {
    for (const auto& [name, p, n] :
         {std::tuple<const char*, const void*, int64_t>{"extra.keys", extra.keys, extra_keys},
          {"extra.values", extra.values, extra_values}}) {
      if (Status s = detail::check_pointer(kOp, name, p, n, sh.dtype); !s.ok()) return s;
      if (reinterpret_cast<uintptr_t>(p) % 16 != 0) {
        return Status(StatusCode::kMisaligned,
                      std::string(kOp) + ": " + name + " must be 16-byte aligned");
      }
    }
  }
  if (Status s = detail::ivf::check_workspace(kOp, "ivf_attention_workspace_size", d_workspace,
                                              workspace_bytes, l.bytes);
      !s.ok()) {
    return s;
  }
  const size_t element = 2;
  if (Status s = detail::check_overlaps(
          kOp, {detail::byte_region("queries.data", queries.data,
                                    static_cast<size_t>(query_rows * sh.dim) * element, false),
                detail::byte_region("index.data", index.data, l.index.bytes, false),
                detail::byte_region("extra.keys", extra.keys,
                                    static_cast<size_t>(extra_keys) * element, false),
                detail::byte_region("extra.values", extra.values,
                                    static_cast<size_t>(extra_values) * element, false),
                detail::byte_region("d_out", d_out, static_cast<size_t>(out_elems) * element, true),
                detail::byte_region("d_lse", d_lse, static_cast<size_t>(query_rows) * 4, true),
                detail::byte_region("d_workspace", d_workspace, l.bytes, true)});
      !s.ok())
    return s;
  detail::ivf::AttentionCall call;
  static_cast<detail::ivf::QueryCall&>(call) =
      detail::ivf::query_call(index, l.index, queries, d_workspace);
  call.tokens = index.tokens;
  call.n_probe = params.n_probe;
  call.n_estimate = params.n_estimate;
  call.scale = params.scale > 0.0f ? params.scale : 1.0f / std::sqrt(static_cast<float>(sh.dim));
  call.group = params.group;
  call.extra = extra;
  call.out = d_out;
  call.lse = d_lse;
  call.layout = l;
  return sh.dtype == DType::kFloat16 ? detail::ivf::launch_attention<__half>(call, stream)
                                     : detail::ivf::launch_attention<__nv_bfloat16>(call, stream);
}

}  // namespace cudaops
