// The IVF index's build and extension: the public entry points check every argument (ivf_plan.h)
// and pick the keys' dtype (ivf_build_<dtype>.cu).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cuda_runtime_api.h>

#include <sstream>
#include <string>

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

Status ivf_copy(const IvfIndex& from, IvfIndex* to, cudaStream_t stream) {
  constexpr const char* kOp = "ivf_copy";
  if (to == nullptr) return detail::ivf::invalid(kOp, "to must not be null");
  IvfLayout a, b;
  if (Status s = detail::ivf::layout_of(kOp, from.shape, &a); !s.ok()) return s;
  if (Status s = detail::ivf::check_held(kOp, from); !s.ok()) return s;
  if (Status s = detail::ivf::check_index_data(kOp, from, "from.data"); !s.ok()) return s;
  if (Status s = detail::ivf::layout_of(kOp, to->shape, &b); !s.ok()) return s;
  const IvfShape &fs = from.shape, &ts = to->shape;
  if (ts.heads != fs.heads || ts.dim != fs.dim || ts.value_dim != fs.value_dim ||
      ts.dtype != fs.dtype) {
    return detail::ivf::invalid(kOp, "to->shape must have from's heads, dim, value_dim and dtype");
  }
  if (ts.capacity < from.tokens || ts.max_clusters < from.n_clusters) {
    std::ostringstream text;
    text << "to->shape (capacity " << ts.capacity << ", max_clusters " << ts.max_clusters
         << ") must hold from's " << from.tokens << " tokens and " << from.n_clusters
         << " clusters";
    return detail::ivf::invalid(kOp, text.str());
  }
  if (Status s = detail::ivf::check_index_data(kOp, *to, "to->data"); !s.ok()) return s;
  const auto* src = static_cast<const unsigned char*>(from.data);
  auto* dst = static_cast<unsigned char*>(to->data);
  if (src < dst + b.bytes && dst < src + a.bytes) {
    return detail::ivf::invalid(kOp, "to->data must not overlap from.data");
  }
  const size_t h = static_cast<size_t>(fs.heads);
  const size_t elem = dtype_size(fs.dtype);
  const size_t d = static_cast<size_t>(fs.dim), dv = static_cast<size_t>(fs.value_dim);
  const size_t held = static_cast<size_t>(from.tokens), n = static_cast<size_t>(from.n_clusters);
  const size_t fc = static_cast<size_t>(fs.capacity), tc = static_cast<size_t>(ts.capacity);
  const size_t fm = static_cast<size_t>(fs.max_clusters), tm = static_cast<size_t>(ts.max_clusters);
  // One strided copy per array: H rows of what is held, from one row pitch to the other.
  struct Rows {
    size_t from_offset, to_offset, width, from_pitch, to_pitch, height;
  };
  const Rows rows[] = {
      {a.means, b.means, d * 4, d * 4, d * 4, h},
      {a.centroids, b.centroids, n * d * 4, fm * d * 4, tm * d * 4, h},
      {a.centroids_lp, b.centroids_lp, n * d * elem, fm * d * elem, tm * d * elem, h},
      {a.offsets, b.offsets, (n + 1) * 8, (fm + 1) * 8, (tm + 1) * 8, h},
      {a.sizes, b.sizes, n * 4, fm * 4, tm * 4, h},
      {a.ids, b.ids, held * 4, fc * 4, tc * 4, h},
      {a.keys, b.keys, held * d * elem, fc * d * elem, tc * d * elem, h},
      {a.values, b.values, held * dv * elem, fc * dv * elem, tc * dv * elem, h},
      {a.value_sums, b.value_sums, n * dv * 4, fm * dv * 4, tm * dv * 4, h},
      {a.key_means, b.key_means, n * d * elem, fm * d * elem, tm * d * elem, h},
      {a.largest, b.largest, 4, 4, 4, 1},
  };
  for (const Rows& r : rows) {
    if (r.width == 0) continue;
    if (const cudaError_t e =
            cudaMemcpy2DAsync(dst + r.to_offset, r.to_pitch, src + r.from_offset, r.from_pitch,
                              r.width, r.height, cudaMemcpyDeviceToDevice, stream);
        e != cudaSuccess) {
      (void)cudaGetLastError();
      return Status(StatusCode::kCudaError,
                    std::string(kOp) + ": cudaMemcpy2DAsync: " + cudaGetErrorString(e),
                    static_cast<int>(e));
    }
  }
  to->tokens = from.tokens;
  to->n_clusters = from.n_clusters;
  return Status();
}

}  // namespace cudaops
