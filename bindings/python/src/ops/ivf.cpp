// cudaops.ivf: the IVF index over attention KV caches (build_global, Index.search, clusters,
// retrieve, extend, save; load).
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "../array.h"
#include "../array_import.h"
#include "../ops.h"
#include "cudaops/ivf.h"

namespace cudaops::python {

namespace {

/// A C-contiguous [heads, tokens, dim] array of float16 or bfloat16.
void require_heads_tokens_dim(const CallContext& ctx, const ArrayView& v) {
  if (v.shape.size() != 3) {
    throw py::value_error(std::string(ctx.op()) + ": " + v.name +
                          ": expected 3 dimensions [heads, tokens, dim], got shape " +
                          shape_text(v.shape));
  }
  if (v.dtype != DType::kFloat16 && v.dtype != DType::kBFloat16) {
    throw py::type_error(std::string(ctx.op()) + ": " + v.name + ": dtype " + dtype_name(v.dtype) +
                         " is not supported; expected float16 or bfloat16");
  }
  ctx.require_contiguous(v);
}

/// An index and the memory it lives in (an array of the module's pool, kept alive with it).
class PyIndex {
 public:
  IvfIndex index;
  py::object buffer;  // the cudaops.Array holding index.data
  int device = 0;
  int64_t largest_ = -1;  // the largest cluster's size once read; -1: not read since a change

  /// queries [q_heads, Q, dim] of the index's dtype and dim, imported for reading.
  ArrayView import_queries(CallContext& ctx, py::handle queries, IvfQueries* q) const {
    ArrayView vq = ctx.import(queries, "queries", Access::kRead);
    require_heads_tokens_dim(ctx, vq);
    if (vq.dtype != index.shape.dtype) {
      throw py::type_error(std::string(ctx.op()) + ": queries: dtype " + dtype_name(vq.dtype) +
                           " does not match the index's " + dtype_name(index.shape.dtype));
    }
    if (vq.shape[2] != index.shape.dim) {
      throw py::value_error(std::string(ctx.op()) + ": queries: expected dim " +
                            std::to_string(index.shape.dim) + ", got shape " +
                            shape_text(vq.shape));
    }
    q->data = vq.data;
    q->q_heads = vq.shape[0];
    q->n_queries = vq.shape[1];
    return vq;
  }

  /// Makes the work of `ctx` wait for the index (and checks the queries' device).
  void prepare(CallContext& ctx, ArrayView& vq) const {
    const int at = ctx.prepare({&vq});
    if (vq.size > 0 && at != device) {
      throw py::value_error(std::string(ctx.op()) + ": queries: is on CUDA device " +
                            std::to_string(at) + " but the index is on CUDA device " +
                            std::to_string(device));
    }
    py::cast<const Array&>(buffer).order_before(ctx.stream());
  }

  /// The largest cluster's size, read from the device once per build or extension (a small copy
  /// that waits for the index's work).
  int64_t largest() {
    if (largest_ < 0) {
      DeviceGuard guard(device, "Index.retrieve");
      py::cast<const Array&>(buffer).order_before(cudaStreamLegacy);
      IvfLayout layout;
      check(ivf_index_size(index.shape, &layout));
      int32_t value = 0;
      cudaError_t e;
      {
        py::gil_scoped_release nogil;
        e = cudaMemcpy(&value, static_cast<const unsigned char*>(index.data) + layout.largest,
                       sizeof(value), cudaMemcpyDeviceToHost);
      }
      if (e != cudaSuccess) {
        (void)cudaGetLastError();
        check(Status(StatusCode::kCudaError,
                     std::string("Index.retrieve: reading the largest cluster's size: ") +
                         cudaGetErrorString(e)));
      }
      largest_ = value;
    }
    return largest_;
  }

  py::object clusters(py::handle queries, py::handle n_probe_obj, py::handle group_obj,
                      py::handle stream) const {
    CallContext ctx("Index.clusters", stream);
    const bool group = bool_arg(group_obj, ctx.op(), "group");
    IvfProbeParams params;
    params.n_probe = int_arg(n_probe_obj, ctx.op(), "n_probe");
    params.group = group;
    IvfQueries q;
    ArrayView vq = import_queries(ctx, queries, &q);
    size_t bytes = 0;
    check(ivf_clusters_workspace_size(index, q, params, &bytes));
    prepare(ctx, vq);
    const std::vector<int64_t> shape = {group ? index.shape.heads : q.q_heads, q.n_queries,
                                        params.n_probe};
    auto* out = static_cast<int32_t*>(ctx.output_data(nullptr, shape, DType::kInt32));
    void* workspace = ctx.scratch(bytes);
    Status status;
    {
      py::gil_scoped_release nogil;
      status = ivf_clusters(index, q, params, out, workspace, bytes, ctx.stream());
    }
    check(status);
    return ctx.take_result(0, queries);
  }

  py::tuple retrieve(py::handle queries, py::handle n_probe_obj, py::handle max_tokens_obj,
                     py::handle stream) {
    const std::string op = "Index.retrieve";
    IvfRetrieveParams params;
    params.probe.n_probe = int_arg(n_probe_obj, op.c_str(), "n_probe");
    params.probe.group = true;
    if (max_tokens_obj.is_none()) {
      if (params.probe.n_probe < 1 || params.probe.n_probe > index.n_clusters) {
        throw py::value_error(op + ": n_probe must be from 1 to the index's clusters (" +
                              std::to_string(index.n_clusters) + "), got " +
                              std::to_string(params.probe.n_probe));
      }
      params.max_tokens =
          std::max<int64_t>(1, std::min(index.tokens, params.probe.n_probe * largest()));
    } else {
      params.max_tokens = int_arg(max_tokens_obj, op.c_str(), "max_tokens");
    }
    CallContext ctx("Index.retrieve", stream);
    IvfQueries q;
    ArrayView vq = import_queries(ctx, queries, &q);
    size_t bytes = 0;
    check(ivf_retrieve_workspace_size(index, q, params, &bytes));
    prepare(ctx, vq);
    const IvfShape& s = index.shape;
    const int64_t h = s.heads, n = q.n_queries, m = params.max_tokens;
    IvfRetrieved out;
    out.keys = ctx.output_data(nullptr, {h, n, m, s.dim}, s.dtype);
    if (s.value_dim > 0) out.values = ctx.output_data(nullptr, {h, n, m, s.value_dim}, s.dtype);
    out.ids = static_cast<int64_t*>(ctx.output_data(nullptr, {h, n, m}, DType::kInt64));
    out.lengths = static_cast<int64_t*>(ctx.output_data(nullptr, {h, n}, DType::kInt64));
    void* workspace = ctx.scratch(bytes);
    Status status;
    {
      py::gil_scoped_release nogil;
      status = ivf_retrieve(index, q, params, out, workspace, bytes, ctx.stream());
    }
    check(status);
    py::object keys_out = ctx.take_result(0, queries);
    py::object values_out = py::none();
    size_t next = 1;
    if (s.value_dim > 0) values_out = ctx.take_result(next++, queries);
    py::object ids_out = ctx.take_result(next++, queries);
    py::object lengths_out = ctx.take_result(next, queries);
    return py::make_tuple(keys_out, values_out, ids_out, lengths_out);
  }

  py::tuple search(py::handle queries, py::handle k_obj, py::handle n_probe_obj,
                   py::handle max_candidates_obj, py::handle stream) const {
    CallContext ctx("Index.search", stream);
    IvfSearchParams params;
    params.k = int_arg(k_obj, ctx.op(), "k");
    params.n_probe = int_arg(n_probe_obj, ctx.op(), "n_probe");
    params.max_candidates =
        max_candidates_obj.is_none() ? 0 : int_arg(max_candidates_obj, ctx.op(), "max_candidates");
    IvfQueries q;
    ArrayView vq = import_queries(ctx, queries, &q);
    size_t bytes = 0;
    check(ivf_search_workspace_size(index, q, params, &bytes));
    prepare(ctx, vq);
    const std::vector<int64_t> shape = {q.q_heads, q.n_queries, params.k};
    auto* scores = static_cast<float*>(ctx.output_data(nullptr, shape, DType::kFloat32));
    auto* ids = static_cast<int64_t*>(ctx.output_data(nullptr, shape, DType::kInt64));
    void* workspace = ctx.scratch(bytes);
    Status status;
    {
      py::gil_scoped_release nogil;
      status = ivf_search(index, q, params, scores, ids, workspace, bytes, ctx.stream());
    }
    check(status);
    return py::make_tuple(ctx.take_result(0, queries), ctx.take_result(1, queries));
  }

  py::object attention(py::handle queries, py::handle n_probe_obj, py::handle n_estimate_obj,
                       py::handle extra_keys, py::handle extra_values, py::handle scale_obj,
                       py::handle return_lse_obj, py::handle group_obj, py::handle out,
                       py::handle stream) const {
    CallContext ctx("Index.attention", stream);
    const bool return_lse = bool_arg(return_lse_obj, ctx.op(), "return_lse");
    const bool group = bool_arg(group_obj, ctx.op(), "group");
    const IvfShape& s = index.shape;
    IvfAttentionParams params;
    params.n_probe = int_arg(n_probe_obj, ctx.op(), "n_probe");
    params.n_estimate = int_arg(n_estimate_obj, ctx.op(), "n_estimate");
    params.group = group;
    if (!scale_obj.is_none()) {
      if (!PyFloat_Check(scale_obj.ptr()) && !PyLong_Check(scale_obj.ptr())) {
        throw py::type_error(std::string(ctx.op()) + ": scale must be a number or None, got " +
                             type_name(scale_obj));
      }
      const double scale = py::cast<double>(scale_obj);
      if (!(scale > 0.0) || !std::isfinite(static_cast<float>(scale))) {
        throw py::value_error(std::string(ctx.op()) + ": scale must be finite and > 0, got " +
                              std::to_string(scale));
      }
      params.scale = static_cast<float>(scale);
    }
    IvfQueries q;
    ArrayView vq = import_queries(ctx, queries, &q);
    if (extra_keys.is_none() != extra_values.is_none()) {
      throw py::value_error(std::string(ctx.op()) +
                            ": extra_keys and extra_values must be given together");
    }
    std::optional<ArrayView> vek, vev, vout;
    IvfExtra extra;
    if (!extra_keys.is_none()) {
      vek = ctx.import(extra_keys, "extra_keys", Access::kRead);
      vev = ctx.import(extra_values, "extra_values", Access::kRead);
      require_heads_tokens_dim(ctx, *vek);
      require_heads_tokens_dim(ctx, *vev);
      if (vek->dtype != s.dtype || vek->shape[0] != s.heads || vek->shape[2] != s.dim) {
        throw py::value_error(std::string(ctx.op()) + ": extra_keys: expected [" +
                              std::to_string(s.heads) + ", tokens, " + std::to_string(s.dim) +
                              "] of " + dtype_name(s.dtype) + ", got shape " +
                              shape_text(vek->shape) + " of " + dtype_name(vek->dtype));
      }
      if (vev->dtype != s.dtype || vev->shape[0] != s.heads || vev->shape[1] != vek->shape[1] ||
          vev->shape[2] != s.value_dim) {
        throw py::value_error(std::string(ctx.op()) + ": extra_values: expected [" +
                              std::to_string(s.heads) + ", " + std::to_string(vek->shape[1]) +
                              ", " + std::to_string(s.value_dim) + "] of " + dtype_name(s.dtype) +
                              ", got shape " + shape_text(vev->shape) + " of " +
                              dtype_name(vev->dtype));
      }
      extra.tokens = vek->shape[1];
    }
    const std::vector<int64_t> shape = {q.q_heads, q.n_queries, s.value_dim};
    if (!out.is_none()) {
      vout = ctx.import(out, "out", Access::kWrite);
      ctx.require_contiguous(*vout);
      if (vout->dtype != s.dtype || vout->shape != shape) {
        throw py::value_error(std::string(ctx.op()) + ": out: expected shape " + shape_text(shape) +
                              " of " + dtype_name(s.dtype) + ", got " + shape_text(vout->shape) +
                              " of " + dtype_name(vout->dtype));
      }
    }
    size_t bytes = 0;
    check(ivf_attention_workspace_size(index, q, params, extra, &bytes));
    const int at =
        ctx.prepare({&vq, vek ? &*vek : nullptr, vev ? &*vev : nullptr, vout ? &*vout : nullptr});
    if (vq.size > 0 && at != device) {
      throw py::value_error(std::string(ctx.op()) + ": queries: is on CUDA device " +
                            std::to_string(at) + " but the index is on CUDA device " +
                            std::to_string(device));
    }
    py::cast<const Array&>(buffer).order_before(ctx.stream());
    if (vek) {
      extra.keys = vek->data;
      extra.values = vev->data;
    }
    void* o = ctx.output_data(vout ? &*vout : nullptr, shape, s.dtype);
    auto* lse = return_lse ? static_cast<float*>(ctx.output_data(nullptr, {q.q_heads, q.n_queries},
                                                                 DType::kFloat32))
                           : nullptr;
    void* workspace = ctx.scratch(bytes);
    Status status;
    {
      py::gil_scoped_release nogil;
      status = ivf_attention(index, q, params, extra, o, lse, workspace, bytes, ctx.stream());
    }
    check(status);
    if (!return_lse) return ctx.finish(out, queries);
    py::object o_obj = vout ? py::reinterpret_borrow<py::object>(out) : ctx.take_result(0, queries);
    return py::make_tuple(o_obj, ctx.take_result(vout ? 0 : 1, queries));
  }

  /// The index's arrays as (address, shape, typestr) over the held tokens' and clusters' rows, for
  /// benches and tests that read the index in place (16-bit data as "<u2": reinterpret it).
  py::dict arrays() const {
    IvfLayout l;
    check(ivf_index_size(index.shape, &l));
    const IvfShape& s = index.shape;
    const auto base = reinterpret_cast<uintptr_t>(index.data);
    const int64_t h = s.heads, cm = s.max_clusters, cap = s.capacity, d = s.dim, dv = s.value_dim;
    py::dict out;
    const auto put = [&](const char* name, size_t offset, const std::vector<int64_t>& shape,
                         const char* typestr) {
      py::tuple extents(shape.size());
      for (size_t i = 0; i < shape.size(); ++i)
        extents[i] = py::int_(shape[i]);
      out[name] = py::make_tuple(base + offset, extents, typestr);
    };
    put("means", l.means, {h, d}, "<f4");
    put("centroids", l.centroids, {h, cm, d}, "<f4");
    put("centroids_lp", l.centroids_lp, {h, cm, d}, "<u2");
    put("offsets", l.offsets, {h, cm + 1}, "<i8");
    put("sizes", l.sizes, {h, cm}, "<i4");
    put("ids", l.ids, {h, cap}, "<i4");
    put("keys", l.keys, {h, cap, d}, "<u2");
    put("values", l.values, {h, cap, dv}, "<u2");
    put("value_sums", l.value_sums, {h, cm, dv}, "<f4");
    put("key_means", l.key_means, {h, cm, d}, "<u2");
    return out;
  }

  void extend(py::handle keys, py::handle values, py::handle n_clusters_obj, py::handle n_iters_obj,
              py::handle stream) {
    CallContext ctx("Index.extend", stream);
    IvfExtendParams params;
    params.n_clusters = int_arg(n_clusters_obj, ctx.op(), "n_clusters");
    params.n_iters = iters_arg(n_iters_obj, ctx.op());
    ArrayView vk = ctx.import(keys, "keys", Access::kRead);
    require_heads_tokens_dim(ctx, vk);
    std::optional<ArrayView> vv;
    if (!values.is_none()) {
      vv = ctx.import(values, "values", Access::kRead);
      require_heads_tokens_dim(ctx, *vv);
    }
    const IvfShape& s = index.shape;
    if (vk.dtype != s.dtype || vk.shape[0] != s.heads || vk.shape[2] != s.dim) {
      throw py::value_error("Index.extend: keys: expected [" + std::to_string(s.heads) +
                            ", tokens, " + std::to_string(s.dim) + "] of " + dtype_name(s.dtype) +
                            ", got shape " + shape_text(vk.shape) + " of " + dtype_name(vk.dtype));
    }
    if (vv && (vv->dtype != s.dtype || vv->shape[0] != s.heads || vv->shape[1] != vk.shape[1] ||
               vv->shape[2] != s.value_dim)) {
      throw py::value_error("Index.extend: values: expected [" + std::to_string(s.heads) + ", " +
                            std::to_string(vk.shape[1]) + ", " + std::to_string(s.value_dim) +
                            "] of " + dtype_name(s.dtype) + ", got shape " + shape_text(vv->shape));
    }
    IvfInput input;
    input.seq = vk.shape[1];
    const int at = ctx.prepare({&vk, vv ? &*vv : nullptr});
    if (at != device) {
      throw py::value_error("Index.extend: keys: is on CUDA device " + std::to_string(at) +
                            " but the index is on CUDA device " + std::to_string(device));
    }
    py::cast<const Array&>(buffer).order_before(ctx.stream());
    // Past the room: grow by doubling (amortised), unless the stream is being captured. The
    // arguments are checked by the library against the room the index will have, before any
    // reallocation. (n_clusters above seq is refused by that check: clamped here only so that
    // the sum cannot overflow.)
    IvfIndex room = index;
    const int64_t need_tokens = index.tokens + input.seq;
    const int64_t need_clusters =
        index.n_clusters + std::clamp<int64_t>(params.n_clusters, 0, input.seq);
    if (need_tokens > s.capacity) room.shape.capacity = std::max(need_tokens, 2 * s.capacity);
    if (need_clusters > s.max_clusters) {
      room.shape.max_clusters =
          std::max(need_clusters, std::min(2 * s.max_clusters, kIvfMaxClusters));
    }
    size_t bytes = 0;
    check(ivf_extend_workspace_size(room, input, params, &bytes));
    if (room.shape.capacity != s.capacity || room.shape.max_clusters != s.max_clusters) {
      regrow(ctx.op(), room.shape.capacity, room.shape.max_clusters, ctx.stream());
    }
    input.keys = vk.data;
    input.values = vv ? vv->data : nullptr;
    void* workspace = ctx.scratch(bytes);
    Status status;
    {
      py::gil_scoped_release nogil;
      status = ivf_extend(input, params, &index, workspace, bytes, ctx.stream());
    }
    check(status);
    // Later work on other streams waits for this extension, as for the build.
    py::cast<Array&>(buffer).mark_ready(ctx.stream(), ctx.op());
    largest_ = -1;
  }

  /// Moves the index into a new buffer of `capacity` tokens and `max_clusters` clusters per head
  /// (ivf_copy on `stream`); the old buffer goes back to the pool once the copy is done.
  void regrow(const char* op, int64_t capacity, int64_t max_clusters, cudaStream_t stream) {
    if (capturing(stream, op)) {
      throw py::value_error(std::string(op) + ": the index must grow (capacity " +
                            std::to_string(index.shape.capacity) + ", max_clusters " +
                            std::to_string(index.shape.max_clusters) + " to " +
                            std::to_string(capacity) + ", " + std::to_string(max_clusters) +
                            "), which reallocates, while the stream is captured into a CUDA "
                            "graph; reserve room first (build_global's capacity= and "
                            "max_clusters=, or Index.reserve)");
    }
    IvfIndex grown;
    grown.shape = index.shape;
    grown.shape.capacity = capacity;
    grown.shape.max_clusters = max_clusters;
    IvfLayout layout;
    check(ivf_index_size(grown.shape, &layout));
    DeviceGuard guard(device, op);
    auto array =
        std::make_unique<Array>(std::vector<int64_t>{static_cast<int64_t>(layout.bytes / 4)},
                                DType::kInt32, device, stream, op);
    grown.data = array->data();
    Array& old = py::cast<Array&>(buffer);
    old.order_before(stream);
    Status status;
    {
      py::gil_scoped_release nogil;
      status = ivf_copy(index, &grown, stream);
    }
    old.mark_ready_noexcept(stream);  // its memory is freed after the copy, not before
    check(status);
    array->mark_ready(stream, op);
    index = grown;
    buffer = py::cast(std::move(array));
  }

  void reserve(py::handle capacity_obj, py::handle max_clusters_obj, py::handle stream) {
    CallContext ctx("Index.reserve", stream);
    const int64_t capacity = int_arg(capacity_obj, ctx.op(), "capacity");
    const int64_t max_clusters = max_clusters_obj.is_none()
                                     ? index.shape.max_clusters
                                     : int_arg(max_clusters_obj, ctx.op(), "max_clusters");
    if (capacity < index.tokens || max_clusters < index.n_clusters) {
      throw py::value_error("Index.reserve: capacity and max_clusters must hold the index's " +
                            std::to_string(index.tokens) + " tokens and " +
                            std::to_string(index.n_clusters) + " clusters, got " +
                            std::to_string(capacity) + " and " + std::to_string(max_clusters));
    }
    if (capacity == index.shape.capacity && max_clusters == index.shape.max_clusters) return;
    ctx.prepare({});
    regrow(ctx.op(), capacity, max_clusters, ctx.stream());
  }

  void save(py::handle path) const {
    const std::string file = path_arg(path, "Index.save", "path");
    DeviceGuard guard(device, "Index.save");
    py::cast<const Array&>(buffer).order_before(cudaStreamLegacy);
    Status status;
    {
      py::gil_scoped_release nogil;
      status = ivf_save(index, file.c_str(), cudaStreamLegacy);
    }
    check(status);
  }
};

PyIndex load(py::handle path, py::handle device_obj) {
  constexpr const char* kOp = "ivf.load";
  const std::string file = path_arg(path, kOp, "path");
  IvfShape shape;
  check(ivf_saved_shape(file.c_str(), &shape));  // the file's header and table, checked
  int device = 0;
  if (device_obj.is_none()) {
    if (const cudaError_t e = cudaGetDevice(&device); e != cudaSuccess) {
      (void)cudaGetLastError();
      check(Status(StatusCode::kCudaError,
                   std::string(kOp) + ": no CUDA device: " + cudaGetErrorString(e)));
    }
  } else {
    const int64_t d = int_arg(device_obj, kOp, "device");
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess) {
      (void)cudaGetLastError();
      count = 0;
    }
    if (d < 0 || d >= count) {
      throw py::value_error(std::string(kOp) + ": device must be from 0 to " +
                            std::to_string(count - 1) + ", got " + std::to_string(d));
    }
    device = static_cast<int>(d);
  }
  DeviceGuard guard(device, kOp);
  IvfLayout layout;
  check(ivf_index_size(shape, &layout));
  auto array = std::make_unique<Array>(std::vector<int64_t>{static_cast<int64_t>(layout.bytes / 4)},
                                       DType::kInt32, device, cudaStreamLegacy, kOp);
  PyIndex out;
  out.index.shape = shape;
  out.index.data = array->data();
  out.device = device;
  Status status;
  {
    py::gil_scoped_release nogil;
    status = ivf_load(file.c_str(), &out.index, cudaStreamLegacy);
  }
  check(status);
  array->mark_ready(cudaStreamLegacy, kOp);
  out.buffer = py::cast(std::move(array));
  return out;
}

PyIndex build_global(py::handle keys, py::handle values, py::handle n_clusters_obj,
                     py::handle n_segments_obj, py::handle n_iters_obj, py::handle global_pass_obj,
                     py::handle prune_obj, py::handle capacity_obj, py::handle max_clusters_obj,
                     py::handle stream) {
  CallContext ctx("ivf.build_global", stream);
  ctx.results_like(py::none());  // the index's buffer is the module's
  IvfBuildParams params;
  params.n_clusters = int_arg(n_clusters_obj, ctx.op(), "n_clusters");
  params.n_segments = int_arg(n_segments_obj, ctx.op(), "n_segments");
  params.n_iters = iters_arg(n_iters_obj, ctx.op());
  params.global_pass = bool_arg(global_pass_obj, ctx.op(), "global_pass");
  params.prune = bool_arg(prune_obj, ctx.op(), "prune");
  ArrayView vk = ctx.import(keys, "keys", Access::kRead);
  require_heads_tokens_dim(ctx, vk);
  std::optional<ArrayView> vv;
  if (!values.is_none()) {
    vv = ctx.import(values, "values", Access::kRead);
    require_heads_tokens_dim(ctx, *vv);
    ctx.require_same_dtype(vk, *vv);
    if (vv->shape[0] != vk.shape[0] || vv->shape[1] != vk.shape[1]) {
      throw py::value_error("ivf.build_global: values: expected [heads, tokens] of keys (" +
                            shape_text({vk.shape[0], vk.shape[1]}) + "), got shape " +
                            shape_text(vv->shape));
    }
  }
  PyIndex out;
  IvfShape& shape = out.index.shape;
  shape.heads = vk.shape[0];
  shape.dim = vk.shape[2];
  shape.value_dim = vv ? vv->shape[2] : 0;
  shape.capacity =
      capacity_obj.is_none() ? vk.shape[1] : int_arg(capacity_obj, ctx.op(), "capacity");
  shape.max_clusters = max_clusters_obj.is_none()
                           ? params.n_clusters
                           : int_arg(max_clusters_obj, ctx.op(), "max_clusters");
  shape.dtype = vk.dtype;
  IvfInput input;
  input.seq = vk.shape[1];
  IvfLayout layout;
  size_t bytes = 0;
  // Every size is checked by the library, with its messages, before anything is made.
  check(ivf_index_size(shape, &layout));
  check(ivf_build_workspace_size(shape, input, params, &bytes));
  out.device = ctx.prepare({&vk, vv ? &*vv : nullptr});
  out.index.data =
      ctx.output_data(nullptr, {static_cast<int64_t>(layout.bytes / 4)}, DType::kInt32);
  input.keys = vk.data;
  input.values = vv ? vv->data : nullptr;
  void* workspace = ctx.scratch(bytes);
  Status status;
  {
    py::gil_scoped_release nogil;
    status = ivf_build(input, params, &out.index, workspace, bytes, ctx.stream());
  }
  check(status);
  out.buffer = ctx.take_result(0, py::none());
  return out;
}

void bind_ivf(py::module_& m) {
  py::class_<PyIndex>(m, "IvfIndex", R"doc(An IVF-Flat index over attention keys (and values),
every kv head in one buffer of the device that built it (cudaops.ivf.build_global).)doc")
      .def("search", &PyIndex::search, py::arg("queries"), py::arg("k"), py::arg("n_probe"),
           py::kw_only(), py::arg("max_candidates") = py::none(), py::arg("stream") = py::none(),
           "search(self, queries, k, n_probe, *, max_candidates=None, stream=None)\n--\n\n"
           R"doc(The k best tokens of each query: (scores [q_heads, Q, k] float32, ids [q_heads, Q,
k] int64 token positions), of the queries' kind. queries [q_heads, Q, dim] in the index's dtype,
q_heads a multiple of the index's heads (query head g reads kv head g / (q_heads / heads)). Each
query probes the n_probe clusters of the largest q . c and scores their tokens exactly; with
fewer than k candidates the rest is (-inf, -1). max_candidates bounds the candidates kept per
query (None: every token; candidates past the bound are dropped). The index must stay alive
until the search's work is done, as any input array.)doc")
      .def("clusters", &PyIndex::clusters, py::arg("queries"), py::arg("n_probe"),
           py::arg("group") = true, py::kw_only(), py::arg("stream") = py::none(),
           "clusters(self, queries, n_probe, group=True, *, stream=None)\n--\n\n"
           R"doc(The clusters each query attends to exactly (RetroInfer): int32 cluster ids,
ascending, -1 past the non-empty clusters, of the queries' kind. With group (the default),
[heads, Q, n_probe]: per kv head and query, the n_probe clusters of the largest softmax(q . c /
sqrt(dim)) summed over the kv head's query heads; without, [q_heads, Q, n_probe] ranked by q . c
as search ranks them. Empty clusters are never chosen.)doc")
      .def("retrieve", &PyIndex::retrieve, py::arg("queries"), py::arg("n_probe"), py::kw_only(),
           py::arg("max_tokens") = py::none(), py::arg("stream") = py::none(),
           "retrieve(self, queries, n_probe, *, max_tokens=None, stream=None)\n--\n\n"
           R"doc(The tokens of the clusters `clusters(queries, n_probe)` chooses, gathered for an
attention kernel: (keys [heads, Q, max_tokens, dim], values [heads, Q, max_tokens, value_dim] or
None for an index of keys alone, ids [heads, Q, max_tokens] int64 token positions, lengths
[heads, Q] int64), of the queries' kind; each block holds its clusters' tokens in cluster order,
zeros and -1 past its length. max_tokens sizes the blocks statically (tokens past it are
dropped); None: n_probe times the largest cluster (at most the index's size), which never drops
a token and is read from the device once per build or extension.)doc")
      .def("attention", &PyIndex::attention, py::arg("queries"), py::arg("n_probe"),
           py::arg("n_estimate") = 0, py::kw_only(), py::arg("extra_keys") = py::none(),
           py::arg("extra_values") = py::none(), py::arg("scale") = py::none(),
           py::arg("return_lse") = false, py::arg("group") = true, py::arg("out") = py::none(),
           py::arg("stream") = py::none(),
           "attention(self, queries, n_probe, n_estimate=0, *, extra_keys=None, extra_values=None, "
           "scale=None, return_lse=False, group=True, out=None, stream=None)\n--\n\n"
           R"doc(Decode attention over the index: o [q_heads, Q, value_dim] in the queries' dtype
(and, with return_lse, the log-sum-exp [q_heads, Q] float32: o, lse), of the queries' kind.
For each query, softmax(scale * q . k) v over the exact zone (every token of the n_probe clusters
ranked best, as clusters(queries, n_probe, group) ranks them, plus extra_keys / extra_values
[heads, T, dim] / [heads, T, value_dim] of its kv head: attention sinks, recent tokens not yet
indexed) and the estimated zone (the next n_estimate clusters, each standing for its tokens with
its mean key's score and its value sum); the other clusters are left out. scale: None for
1 / sqrt(dim). Every cluster probed with n_estimate 0 is exact attention over the index and the
extras. The same bits every run; nothing allocated but the outputs and the workspace; no host
synchronisation, so a decoding loop can be captured in a CUDA graph.)doc")
      .def("_arrays", &PyIndex::arrays,
           "_arrays(self)\n--\n\n"
           R"doc(The index's arrays in place, {name: (address, shape, typestr)} over its whole
capacity (16-bit data as "<u2", to be reinterpreted as the index's dtype), for benches and tests
that read the index directly; valid while the index lives, after its pending work.)doc")
      .def(
          "_buffer", [](const PyIndex& self) { return self.buffer; },
          "_buffer(self)\n--\n\n"
          R"doc(The cudaops.Array that holds the whole index (int32 words), for operators that pass
the index as one tensor (cudaops.torch).)doc")
      .def("extend", &PyIndex::extend, py::arg("keys"), py::arg("values"), py::arg("n_clusters"),
           py::arg("n_iters") = 10, py::kw_only(), py::arg("stream") = py::none(),
           "extend(self, keys, values, n_clusters, n_iters=10, *, stream=None)\n--\n\n"
           R"doc(Appends keys [heads, T, dim] (and values [heads, T, value_dim], or None for an
index of keys alone) as a segment of their own, clustered into n_clusters new clusters by
spherical k-means centred by each head's mean as built; their positions continue the index's.
Past the room reserved (build_global's capacity and max_clusters, or reserve) the index grows,
doubling its room (a copy into a new buffer); within it nothing is reallocated, so a captured
CUDA graph may extend.)doc")
      .def("reserve", &PyIndex::reserve, py::arg("capacity"), py::arg("max_clusters") = py::none(),
           py::kw_only(), py::arg("stream") = py::none(),
           "reserve(self, capacity, max_clusters=None, *, stream=None)\n--\n\n"
           R"doc(Moves the index into a buffer with room for `capacity` tokens and `max_clusters`
clusters per head (None: as now), more or less than now but at least what it holds; a copy on
`stream`. Reserve before capturing extensions in a CUDA graph: an extend past the room grows the
index by doubling, which reallocates and so is refused during a capture.)doc")
      .def(
          "save", &PyIndex::save, py::arg("path"),
          "save(self, path)\n--\n\n"
          R"doc(Writes the index to `path` (str, bytes or os.PathLike): its tokens and clusters as a
versioned file of named arrays with a CRC-32 each, written to a temporary file renamed into place.
Waits for the index's work.)doc")
      .def_property_readonly("n_clusters",
                             [](const PyIndex& self) { return self.index.n_clusters; })
      .def_property_readonly(
          "size", [](const PyIndex& self) { return self.index.tokens; }, "tokens per head")
      .def_property_readonly("heads", [](const PyIndex& self) { return self.index.shape.heads; })
      .def_property_readonly("dim", [](const PyIndex& self) { return self.index.shape.dim; })
      .def_property_readonly(
          "value_dim", [](const PyIndex& self) { return self.index.shape.value_dim; },
          "dimensions of the values (0: the index holds keys alone)")
      .def_property_readonly(
          "dtype",
          [](const PyIndex& self) { return std::string(dtype_name(self.index.shape.dtype)); },
          "the keys' and values' dtype, as a name")
      .def_property_readonly(
          "capacity", [](const PyIndex& self) { return self.index.shape.capacity; },
          "tokens per head the index has room for")
      .def_property_readonly(
          "max_clusters", [](const PyIndex& self) { return self.index.shape.max_clusters; },
          "clusters per head the index has room for")
      .def_property_readonly("device", [](const PyIndex& self) { return self.device; })
      .def_property_readonly(
          "nbytes",
          [](const PyIndex& self) { return py::cast<const Array&>(self.buffer).nbytes(); },
          "bytes of device memory the index holds")
      .def("__repr__", [](const PyIndex& self) {
        return "<cudaops.ivf.Index heads=" + std::to_string(self.index.shape.heads) +
               " size=" + std::to_string(self.index.tokens) +
               " dim=" + std::to_string(self.index.shape.dim) +
               " n_clusters=" + std::to_string(self.index.n_clusters) + " " +
               dtype_name(self.index.shape.dtype) + " device=" + std::to_string(self.device) + ">";
      });
  m.def("ivf_load", &load, py::arg("path"), py::arg("device") = py::none(),
        "ivf_load(path, device=None)\n--\n\n"
        R"doc(An index saved by Index.save, on `device` (None: the current device). A file that is
not a regular file of this user's that no one else can write, or that is truncated, corrupted, of
another byte order or a newer version, or whose contents disagree (cluster ranges, sizes, token
ids), is refused with OSError; nothing is loaded. The index holds exactly the file's tokens.)doc");
  m.def("ivf_build_global", &build_global, py::arg("keys"), py::arg("values"),
        py::arg("n_clusters"), py::arg("n_segments"), py::arg("n_iters") = 10,
        py::arg("global_pass") = true, py::kw_only(), py::arg("prune") = true,
        py::arg("capacity") = py::none(), py::arg("max_clusters") = py::none(),
        py::arg("stream") = py::none(),
        "ivf_build_global(keys, values, n_clusters, n_segments, n_iters=10, global_pass=True, *, "
        "prune=True, capacity=None, max_clusters=None, stream=None)\n--\n\n"
        R"doc(An IVF-Flat index over keys [heads, tokens, dim] (float16 or bfloat16, C-contiguous,
dim a multiple of 8 up to 512) and values [heads, tokens, value_dim] of the same dtype, or None.
Each head's keys are centred by its mean; its tokens split into n_segments contiguous segments
(as numpy.array_split splits them), each clustered on its own into n_clusters / n_segments
clusters by spherical k-means (n_iters iterations, strided initialisation), every segment of
every head in one call; with global_pass every token then joins the cluster of its largest inner
product among all of its head's clusters; with prune (n_clusters >= 4096, dim <= 256) that pass
skips the chunks of clusters that provably hold no token's best (the same labels but at near
ties; turn it off for keys with no structure, where little is skipped). capacity and max_clusters (None: the tokens and clusters
built) reserve room per head for Index.extend. Runs on `stream`, ordered after the inputs'
producers.)doc");
}

}  // namespace

CUDAOPS_PYTHON_OPS("ivf", bind_ivf);

}  // namespace cudaops::python
