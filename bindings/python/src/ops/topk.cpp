// cudaops.topk: the k largest (or smallest) along the last axis, with their indices.
#include <string>
#include <vector>

#include "../array_import.h"
#include "../ops.h"
#include "../rows.h"
#include "cudaops/topk.h"

namespace cudaops::python {

namespace {

py::object topk(py::handle x, py::handle k_obj, bool largest, bool sorted, py::handle index_dtype,
                py::handle stream) {
  CallContext ctx("topk", stream);
  if (!PyLong_Check(k_obj.ptr()) || PyBool_Check(k_obj.ptr())) {
    throw py::type_error("topk: k must be an int, got " + type_name(k_obj));
  }
  int overflow = 0;
  const long long k = PyLong_AsLongLongAndOverflow(k_obj.ptr(), &overflow);
  if (overflow != 0) throw py::value_error("topk: k is out of range");
  TopkOptions options;
  options.largest = largest;
  options.sorted = sorted;
  options.index_dtype = parse_dtype_arg(index_dtype, "topk: index_dtype");
  ArrayView vx = ctx.import(x, "x", Access::kRead);
  ctx.require_floating(vx);
  const Rows rx = rows_of(ctx, vx);
  // Sizes, k and dtypes are checked (by the library, with its messages) before anything is made.
  size_t bytes = 0;
  check(topk_workspace_size(rx.rows, rx.cols, k, vx.dtype, &bytes));
  if (options.index_dtype != DType::kInt64 && options.index_dtype != DType::kInt32) {
    throw py::type_error(std::string("topk: index_dtype must be int64 or int32, got ") +
                         dtype_name(options.index_dtype));
  }
  ctx.prepare({&vx});
  std::vector<int64_t> shape = vx.shape;
  shape.back() = k;
  void* d_values = ctx.output_data(nullptr, shape, vx.dtype);
  void* d_indices = ctx.output_data(nullptr, shape, options.index_dtype);
  void* d_workspace = ctx.scratch(bytes);
  Status status;
  {
    py::gil_scoped_release nogil;
    status = cudaops::topk({vx.data, rx.stride}, {d_values, k}, {d_indices, k}, rx.rows, rx.cols, k,
                           vx.dtype, options, d_workspace, bytes, ctx.stream());
  }
  check(status);
  return py::make_tuple(ctx.take_result(0, x), ctx.take_result(1, x));
}

void bind_topk(py::module_& m) {
  m.def("topk", &topk, py::arg("x"), py::arg("k"), py::kw_only(), py::arg("largest") = true,
        py::arg("sorted") = true, py::arg("index_dtype") = "int64", py::arg("stream") = py::none(),
        "topk(x, k, *, largest=True, sorted=True, index_dtype='int64', stream=None)\n--\n\n"
        R"doc(The k largest (or smallest) elements along the last axis, with their indices.

x: a CUDA array (float32, float16 or bfloat16) whose last axis is contiguous and whose leading
axes are evenly spaced rows. k: 1 <= k <= min(x.shape[-1], 4096); the last axis holds at most
2^24 elements. Returns (values, indices), each of shape x.shape[:-1] + (k,) and of x's kind:
values in x's dtype, indices int64 (or int32 with index_dtype="int32").

Order: NaN ranks above every number (as in torch.topk), -0.0 below +0.0, and equal elements by
the lower index first, so the result is unique. sorted=True: in rank order (descending for
largest); sorted=False: in ascending index order. Runs on `stream`, ordered after x's producer.)doc");
}

}  // namespace

CUDAOPS_PYTHON_OPS("topk", bind_topk);

}  // namespace cudaops::python
