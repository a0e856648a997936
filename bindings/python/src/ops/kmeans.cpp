// cudaops.kmeans: batched k-means over the leading axes of x [..., n, d].
#include <cuda_runtime_api.h>

#include <initializer_list>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "../array_import.h"
#include "../ops.h"
#include "cudaops/kmeans.h"

namespace cudaops::python {

namespace {

/// `obj` (a str) as the value of its word among `words`; else ValueError naming them.
template <typename E>
E word_arg(py::handle obj, const char* what,
           std::initializer_list<std::pair<const char*, E>> words) {
  const std::string word = str_arg(obj, "kmeans", what);
  std::string names;
  for (const auto& [name, value] : words) {
    if (word == name) return value;
    names += std::string(names.empty() ? "" : " or ") + "\"" + name + "\"";
  }
  throw py::value_error(std::string("kmeans: ") + what + " must be " + names + ", got \"" + word +
                        "\"");
}

/// x [..., n, d] as a strided batch of row-major [n, d] problems: the last axis contiguous, the
/// rows evenly spaced, the leading axes collapsing into one axis of problems.
KmeansPoints points_of(const ArrayView& v) {
  const size_t axes = v.shape.size();
  if (axes < 2) {
    throw py::value_error("kmeans: x: expected at least 2 dimensions [..., n, d], got shape " +
                          shape_text(v.shape));
  }
  KmeansPoints p;
  p.data = v.data;
  p.dtype = v.dtype;
  p.n = v.shape[axes - 2];
  p.d = v.shape[axes - 1];
  p.batch = 1;
  for (size_t i = 0; i + 2 < axes; ++i)
    p.batch *= v.shape[i];
  bool ok = p.d <= 1 || v.strides[axes - 1] == 1;
  const int64_t per16 = 16 / v.item_size;
  p.ld = p.n > 1 ? v.strides[axes - 2] : (p.d + per16 - 1) / per16 * per16;
  ok = ok && p.ld >= p.d;
  p.batch_stride = p.n * p.ld;
  int64_t expected = -1;  // the stride the next outer leading axis must have
  for (size_t k = axes - 2; k-- > 0;) {
    if (v.shape[k] == 1) continue;
    if (expected < 0) {
      p.batch_stride = v.strides[k];
      ok = ok && p.batch_stride >= 0;
    } else {
      ok = ok && v.strides[k] == expected;
    }
    expected = v.strides[k] * v.shape[k];
  }
  if (!ok) {
    throw py::value_error(
        "kmeans: x: expected the last axis contiguous, rows evenly spaced and the leading axes "
        "evenly spaced problems, got shape " +
        shape_text(v.shape) + " with strides " + shape_text(v.strides) + " (in elements)");
  }
  return p;
}

py::object kmeans(py::handle x, py::handle n_clusters_obj, py::handle n_iters_obj,
                  py::handle metric_obj, py::handle center_obj, py::handle init,
                  py::handle seed_obj, py::handle precision_obj, py::handle stream) {
  CallContext ctx("kmeans", stream);
  KmeansParams params;
  params.n_clusters = int_arg(n_clusters_obj, "kmeans", "n_clusters");
  params.n_iters = iters_arg(n_iters_obj, "kmeans");
  params.metric = word_arg<KmeansMetric>(
      metric_obj, "metric", {{"l2", KmeansMetric::kL2}, {"cosine", KmeansMetric::kCosine}});
  params.center = bool_arg(center_obj, "kmeans", "center");
  params.precision = word_arg<KmeansPrecision>(
      precision_obj, "precision",
      {{"exact", KmeansPrecision::kExact}, {"tf32", KmeansPrecision::kTf32}});
  const int64_t seed = int_arg(seed_obj, "kmeans", "seed");
  if (seed < 0) throw py::value_error("kmeans: seed must be >= 0, got " + std::to_string(seed));
  params.seed = static_cast<uint64_t>(seed);
  ArrayView vx = ctx.import(x, "x", Access::kRead);
  ctx.require_floating(vx);
  const KmeansPoints points = points_of(vx);
  std::vector<int64_t> lead(vx.shape.begin(), vx.shape.end() - 2);

  std::optional<ArrayView> given;
  if (py::isinstance<py::str>(init)) {
    const std::string name = str_arg(init, "kmeans", "init");
    if (name == "strided") {
      params.init = KmeansInit::kStrided;
    } else if (name == "random") {
      params.init = KmeansInit::kRandom;
    } else {
      throw py::value_error(
          "kmeans: init must be \"strided\", \"random\" or an array of initial centroids, got \"" +
          name + "\"");
    }
  } else {
    params.init = KmeansInit::kGiven;
    given = ctx.import(init, "init", Access::kRead);
    ctx.require_contiguous(*given);
    std::vector<int64_t> want = lead;
    want.push_back(params.n_clusters);
    want.push_back(points.d);
    if (given->shape != want) {
      throw py::value_error("kmeans: init: expected initial centroids of shape " +
                            shape_text(want) + ", got " + shape_text(given->shape));
    }
    if (given->dtype != DType::kFloat32 && given->dtype != vx.dtype) {
      throw py::type_error(std::string("kmeans: init: expected float32 or x's dtype (") +
                           dtype_name(vx.dtype) + "), got " + dtype_name(given->dtype));
    }
  }
  KmeansResult result;
  result.centroid_dtype = given ? given->dtype : DType::kFloat32;
  // Sizes, clusters and dtypes are checked (by the library, with its messages) before anything
  // is made.
  size_t bytes = 0;
  check(kmeans_workspace_size(points, params, &bytes));
  ctx.prepare({&vx, given ? &*given : nullptr});

  std::vector<int64_t> centroid_shape = lead;
  centroid_shape.push_back(params.n_clusters);
  centroid_shape.push_back(points.d);
  std::vector<int64_t> label_shape = lead;
  label_shape.push_back(points.n);
  std::vector<int64_t> size_shape = lead;
  size_shape.push_back(params.n_clusters);
  result.centroids = ctx.output_data(nullptr, centroid_shape, result.centroid_dtype);
  result.labels = static_cast<int32_t*>(ctx.output_data(nullptr, label_shape, DType::kInt32));
  result.sizes = static_cast<int32_t*>(ctx.output_data(nullptr, size_shape, DType::kInt32));
  void* d_workspace = ctx.scratch(bytes);
  Status status;
  {
    py::gil_scoped_release nogil;
    if (given && given->size > 0) {
      const cudaError_t error =
          cudaMemcpyAsync(result.centroids, given->data,
                          static_cast<size_t>(given->size) * static_cast<size_t>(given->item_size),
                          cudaMemcpyDeviceToDevice, ctx.stream());
      if (error != cudaSuccess) {
        (void)cudaGetLastError();
        status = Status(
            StatusCode::kCudaError,
            std::string("kmeans: copying the initial centroids: ") + cudaGetErrorString(error),
            static_cast<int>(error));
      }
    }
    if (status.ok()) {
      status = cudaops::kmeans(points, params, result, d_workspace, bytes, ctx.stream());
    }
  }
  check(status);
  return py::make_tuple(ctx.take_result(0, x), ctx.take_result(1, x), ctx.take_result(2, x));
}

void bind_kmeans(py::module_& m) {
  m.def(
      "kmeans", &kmeans, py::arg("x"), py::arg("n_clusters"), py::arg("n_iters") = 10,
      py::arg("metric") = "l2", py::arg("center") = false, py::arg("init") = "strided",
      py::arg("seed") = 0, py::kw_only(), py::arg("precision") = "exact",
      py::arg("stream") = py::none(),
      "kmeans(x, n_clusters, n_iters=10, metric='l2', center=False, init='strided', seed=0, *, "
      "precision='exact', stream=None)\n--\n\n"
      R"doc(Batched k-means: every problem of x [..., n, d] (the leading axes are the batch) fitted
in one call, the point-by-centroid products on the tensor cores.

x: a CUDA array (float16, bfloat16 or float32) whose last axis is contiguous, rows evenly spaced
(16-byte aligned) and leading axes evenly spaced problems; 1 <= d <= 512 (256 for float32).
n_clusters: 1 to n. metric: "l2" (squared Euclidean; centroids are means) or "cosine" (spherical
k-means: unit centroids, the largest inner product). center: subtract each problem's mean first
(the centroids are then relative to it). init: "strided" (points at rows j * n / n_clusters),
"random" (a sample of distinct points drawn from `seed`), or an array of initial centroids
[..., n_clusters, d] (float32 or x's dtype). Empty clusters keep their centroid. precision
(float32 x only): "exact" (products to about float32's precision, three TF32 products each) or
"tf32" (one TF32 product: 10 mantissa bits, as torch's allow_tf32; faster).

Returns (centroids [..., n_clusters, d] float32 (init's dtype when given), labels [..., n] int32,
sizes [..., n_clusters] int32), of x's kind; the labels are those of the returned centroids. The
same call gives the same bits every time. Runs on `stream`, ordered after x's producer.)doc");
}

}  // namespace

CUDAOPS_PYTHON_OPS("kmeans", bind_kmeans);

}  // namespace cudaops::python
