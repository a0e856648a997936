// The IVF index's build and extension: the public entry points check every argument (ivf_plan.h)
// and pick the keys' dtype (ivf_build_<dtype>.cu).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "cudaops/ivf.h"
#include "ivf/ivf_plan.h"

namespace cudaops {

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
  call.prune = detail::ivf::prune_plan(shape, params);
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
