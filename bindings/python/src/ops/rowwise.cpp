// cudaops.softmax, layer_norm, rms_norm (and their backward passes) and fused_add_rms_norm.
#include <sstream>
#include <string>
#include <vector>

#include "../array_import.h"
#include "../ops.h"
#include "../rows.h"
#include "cudaops/rowwise.h"

namespace cudaops::python {

namespace {

/// A 1-D parameter (weight, bias) of `cols` elements of the data's dtype, contiguous.
void require_vector(const CallContext& ctx, const ArrayView& data, const ArrayView& v,
                    int64_t cols) {
  ctx.require_same_dtype(data, v);
  if (v.shape.size() != 1 || v.shape[0] != cols) {
    throw py::value_error(std::string(ctx.op()) + ": " + v.name + ": expected shape (" +
                          std::to_string(cols) + ",) to match the last axis of " + data.name +
                          ", got " + shape_text(v.shape));
  }
  ctx.require_contiguous(v);
}

/// Per-row float32 statistics (mean, rstd): rows elements, contiguous.
void require_stats(const CallContext& ctx, const ArrayView& v, int64_t rows) {
  if (v.dtype != DType::kFloat32) {
    throw py::type_error(std::string(ctx.op()) + ": " + v.name + ": expected float32, got " +
                         dtype_name(v.dtype));
  }
  if (v.size != rows) {
    throw py::value_error(std::string(ctx.op()) + ": " + v.name + ": expected " +
                          std::to_string(rows) + " elements (one per row), got shape " +
                          shape_text(v.shape));
  }
  ctx.require_contiguous(v);
}

std::vector<int64_t> leading_shape(const ArrayView& v) {
  return std::vector<int64_t>(v.shape.begin(), v.shape.end() - 1);
}

/// `out=` for a row-wise result: x's shape and dtype, writable, any row stride.
std::optional<ArrayView> import_rows_out(CallContext& ctx, py::handle out, const ArrayView& like) {
  if (out.is_none()) return std::nullopt;
  ArrayView view = ctx.import(out, "out", Access::kWrite);
  ctx.require_same_dtype(like, view);
  ctx.require_same_shape(like, view);
  return view;
}

py::object softmax(py::handle x, py::handle out, py::handle stream) {
  CallContext ctx("softmax", stream);
  ArrayView vx = ctx.import(x, "x", Access::kRead);
  ctx.require_floating(vx);
  const Rows rx = rows_of(ctx, vx);
  std::optional<ArrayView> vout = import_rows_out(ctx, out, vx);
  const Rows ry = vout ? rows_of(ctx, *vout) : Rows{rx.rows, rx.cols, rx.cols};
  const ArrayView* pout = vout ? &*vout : nullptr;
  ctx.prepare({&vx, pout});
  void* d_y = ctx.output_data(pout, vx.shape, vx.dtype);
  Status status;
  {
    py::gil_scoped_release nogil;
    status = cudaops::softmax({vx.data, rx.stride}, {d_y, ry.stride}, rx.rows, rx.cols, vx.dtype,
                              ctx.stream());
  }
  check(status);
  return ctx.finish(out, x);
}

py::object softmax_backward(py::handle y, py::handle dy, py::handle out, py::handle stream) {
  CallContext ctx("softmax_backward", stream);
  ArrayView vy = ctx.import(y, "y", Access::kRead);
  ArrayView vdy = ctx.import(dy, "dy", Access::kRead);
  ctx.require_floating(vy);
  ctx.require_same_dtype(vy, vdy);
  ctx.require_same_shape(vy, vdy);
  const Rows ry = rows_of(ctx, vy);
  const Rows rdy = rows_of(ctx, vdy);
  std::optional<ArrayView> vout = import_rows_out(ctx, out, vy);
  const Rows rdx = vout ? rows_of(ctx, *vout) : Rows{ry.rows, ry.cols, ry.cols};
  const ArrayView* pout = vout ? &*vout : nullptr;
  ctx.prepare({&vy, &vdy, pout});
  void* d_dx = ctx.output_data(pout, vy.shape, vy.dtype);
  Status status;
  {
    py::gil_scoped_release nogil;
    status =
        cudaops::softmax_backward({vy.data, ry.stride}, {vdy.data, rdy.stride}, {d_dx, rdx.stride},
                                  ry.rows, ry.cols, vy.dtype, ctx.stream());
  }
  check(status);
  return ctx.finish(out, y);
}

// Statistics of rows of no columns are undefined: refused rather than returned unwritten.
void require_stats_defined(const CallContext& ctx, const Rows& rows, const char* flag,
                           const char* what) {
  if (rows.cols > 0 || rows.rows == 0) return;
  throw py::value_error(std::string(ctx.op()) + ": " + flag +
                        "=True with x's last axis of 0: the " + what +
                        " of an empty row are undefined");
}

py::object layer_norm(py::handle x, py::handle weight, py::handle bias, double eps, py::handle out,
                      bool return_stats, py::handle stream) {
  CallContext ctx("layer_norm", stream);
  ArrayView vx = ctx.import(x, "x", Access::kRead);
  ctx.require_floating(vx);
  const Rows rx = rows_of(ctx, vx);
  ArrayView vw = ctx.import(weight, "weight", Access::kRead);
  ArrayView vb = ctx.import(bias, "bias", Access::kRead);
  require_vector(ctx, vx, vw, rx.cols);
  require_vector(ctx, vx, vb, rx.cols);
  std::optional<ArrayView> vout = import_rows_out(ctx, out, vx);
  const Rows ry = vout ? rows_of(ctx, *vout) : Rows{rx.rows, rx.cols, rx.cols};
  const ArrayView* pout = vout ? &*vout : nullptr;
  if (return_stats) require_stats_defined(ctx, rx, "return_stats", "mean and rstd");
  ctx.prepare({&vx, &vw, &vb, pout});
  void* d_y = ctx.output_data(pout, vx.shape, vx.dtype);
  float* d_mean = nullptr;
  float* d_rstd = nullptr;
  const size_t first_stat = pout ? 0 : 1;
  if (return_stats) {
    d_mean = static_cast<float*>(ctx.output_data(nullptr, leading_shape(vx), DType::kFloat32));
    d_rstd = static_cast<float*>(ctx.output_data(nullptr, leading_shape(vx), DType::kFloat32));
  }
  Status status;
  {
    py::gil_scoped_release nogil;
    status = cudaops::layer_norm({vx.data, rx.stride}, vw.data, vb.data, {d_y, ry.stride}, d_mean,
                                 d_rstd, rx.rows, rx.cols, static_cast<float>(eps), vx.dtype,
                                 ctx.stream());
  }
  check(status);
  py::object y_obj = ctx.finish(out, x);
  if (!return_stats) return y_obj;
  return py::make_tuple(y_obj, ctx.take_result(first_stat, x), ctx.take_result(first_stat + 1, x));
}

py::object rms_norm(py::handle x, py::handle weight, double eps, py::handle out, bool return_rstd,
                    py::handle stream) {
  CallContext ctx("rms_norm", stream);
  ArrayView vx = ctx.import(x, "x", Access::kRead);
  ctx.require_floating(vx);
  const Rows rx = rows_of(ctx, vx);
  ArrayView vw = ctx.import(weight, "weight", Access::kRead);
  require_vector(ctx, vx, vw, rx.cols);
  std::optional<ArrayView> vout = import_rows_out(ctx, out, vx);
  const Rows ry = vout ? rows_of(ctx, *vout) : Rows{rx.rows, rx.cols, rx.cols};
  const ArrayView* pout = vout ? &*vout : nullptr;
  if (return_rstd) require_stats_defined(ctx, rx, "return_rstd", "rstd");
  ctx.prepare({&vx, &vw, pout});
  void* d_y = ctx.output_data(pout, vx.shape, vx.dtype);
  float* d_rstd = nullptr;
  const size_t stat = pout ? 0 : 1;
  if (return_rstd) {
    d_rstd = static_cast<float*>(ctx.output_data(nullptr, leading_shape(vx), DType::kFloat32));
  }
  Status status;
  {
    py::gil_scoped_release nogil;
    status = cudaops::rms_norm({vx.data, rx.stride}, vw.data, {d_y, ry.stride}, d_rstd, rx.rows,
                               rx.cols, static_cast<float>(eps), vx.dtype, ctx.stream());
  }
  check(status);
  py::object y_obj = ctx.finish(out, x);
  if (!return_rstd) return y_obj;
  return py::make_tuple(y_obj, ctx.take_result(stat, x));
}

py::object fused_add_rms_norm(py::handle x, py::handle residual, py::handle weight, double eps,
                              py::handle stream) {
  CallContext ctx("fused_add_rms_norm", stream);
  ArrayView vx = ctx.import(x, "x", Access::kWrite);
  ArrayView vr = ctx.import(residual, "residual", Access::kWrite);
  ctx.require_floating(vx);
  ctx.require_same_dtype(vx, vr);
  ctx.require_same_shape(vx, vr);
  const Rows rx = rows_of(ctx, vx);
  const Rows rr = rows_of(ctx, vr);
  ArrayView vw = ctx.import(weight, "weight", Access::kRead);
  require_vector(ctx, vx, vw, rx.cols);
  ctx.prepare({&vx, &vr, &vw});
  Status status;
  {
    py::gil_scoped_release nogil;
    status =
        cudaops::fused_add_rms_norm({vx.data, rx.stride}, {vr.data, rr.stride}, vw.data, rx.rows,
                                    rx.cols, static_cast<float>(eps), vx.dtype, ctx.stream());
  }
  check(status);
  return py::make_tuple(py::reinterpret_borrow<py::object>(x),
                        py::reinterpret_borrow<py::object>(residual));
}

/// layer_norm_backward (layer = true) and rms_norm_backward.
py::object norm_backward(bool layer, py::handle dy, py::handle x, py::handle weight,
                         py::handle mean, py::handle rstd, py::handle stream) {
  CallContext ctx(layer ? "layer_norm_backward" : "rms_norm_backward", stream);
  ArrayView vdy = ctx.import(dy, "dy", Access::kRead);
  ArrayView vx = ctx.import(x, "x", Access::kRead);
  ctx.require_floating(vx);
  ctx.require_same_dtype(vx, vdy);
  ctx.require_same_shape(vx, vdy);
  const Rows rx = rows_of(ctx, vx);
  const Rows rdy = rows_of(ctx, vdy);
  ArrayView vw = ctx.import(weight, "weight", Access::kRead);
  require_vector(ctx, vx, vw, rx.cols);
  std::optional<ArrayView> vmean;
  if (layer) {
    vmean = ctx.import(mean, "mean", Access::kRead);
    require_stats(ctx, *vmean, rx.rows);
  }
  ArrayView vrstd = ctx.import(rstd, "rstd", Access::kRead);
  require_stats(ctx, vrstd, rx.rows);
  ctx.prepare({&vdy, &vx, &vw, vmean ? &*vmean : nullptr, &vrstd});
  size_t bytes = 0;
  check(layer ? cudaops::layer_norm_backward_workspace_size({rx.rows, rx.cols, vx.dtype}, &bytes)
              : cudaops::rms_norm_backward_workspace_size({rx.rows, rx.cols, vx.dtype}, &bytes));
  void* d_dx = ctx.output_data(nullptr, vx.shape, vx.dtype);
  void* d_dweight = ctx.output_data(nullptr, {rx.cols}, vx.dtype);
  void* d_dbias = layer ? ctx.output_data(nullptr, {rx.cols}, vx.dtype) : nullptr;
  void* d_workspace = ctx.scratch(bytes);
  Status status;
  {
    py::gil_scoped_release nogil;
    const auto* d_mean = static_cast<const float*>(vmean ? vmean->data : nullptr);
    const auto* d_rstd = static_cast<const float*>(vrstd.data);
    status = layer ? cudaops::layer_norm_backward({{vdy.data, rdy.stride},
                                                   {vx.data, rx.stride},
                                                   vw.data,
                                                   d_mean,
                                                   d_rstd,
                                                   {d_dx, rx.cols},
                                                   d_dweight,
                                                   d_dbias},
                                                  {rx.rows, rx.cols, vx.dtype},
                                                  {d_workspace, bytes}, ctx.stream())
                   : cudaops::rms_norm_backward({{vdy.data, rdy.stride},
                                                 {vx.data, rx.stride},
                                                 vw.data,
                                                 d_rstd,
                                                 {d_dx, rx.cols},
                                                 d_dweight},
                                                {rx.rows, rx.cols, vx.dtype}, {d_workspace, bytes},
                                                ctx.stream());
  }
  check(status);
  if (layer) {
    return py::make_tuple(ctx.take_result(0, dy), ctx.take_result(1, dy), ctx.take_result(2, dy));
  }
  return py::make_tuple(ctx.take_result(0, dy), ctx.take_result(1, dy));
}

void bind_rowwise(py::module_& m) {
  m.def("softmax", &softmax, py::arg("x"), py::kw_only(), py::arg("out") = py::none(),
        py::arg("stream") = py::none(),
        "softmax(x, *, out=None, stream=None)\n--\n\n"
        R"doc(softmax along the last axis, computed in float32.

x: a CUDA array (float32, float16 or bfloat16) whose last axis is contiguous and whose leading
axes are evenly spaced rows (a C-contiguous array, or a slice of one along the last axis). out:
written in place when given (it may be x); otherwise the result is a new array of x's kind. A row
of all -inf gives NaN.)doc");
  m.def("softmax_backward", &softmax_backward, py::arg("y"), py::arg("dy"), py::kw_only(),
        py::arg("out") = py::none(), py::arg("stream") = py::none(),
        "softmax_backward(y, dy, *, out=None, stream=None)\n--\n\n"
        R"doc(Gradient of softmax: dx = y * (dy - sum(dy * y)) along the last axis, y being
softmax's output. out: written in place when given (it may be y or dy).)doc");
  m.def(
      "layer_norm", &layer_norm, py::arg("x"), py::arg("weight"), py::arg("bias"),
      py::arg("eps") = 1e-5, py::kw_only(), py::arg("out") = py::none(),
      py::arg("return_stats") = false, py::arg("stream") = py::none(),
      "layer_norm(x, weight, bias, eps=1e-5, *, out=None, return_stats=False, stream=None)\n--\n\n"
      R"doc(Layer normalisation over the last axis: (x - mean) * rstd * weight + bias.

weight and bias: 1-D, x's dtype, as long as x's last axis. eps > 0. With return_stats=True,
returns (y, mean, rstd), the statistics float32 with x's leading shape.)doc");
  m.def(
      "layer_norm_backward",
      [](py::handle dy, py::handle x, py::handle weight, py::handle mean, py::handle rstd,
         py::handle stream) { return norm_backward(true, dy, x, weight, mean, rstd, stream); },
      py::arg("dy"), py::arg("x"), py::arg("weight"), py::arg("mean"), py::arg("rstd"),
      py::kw_only(), py::arg("stream") = py::none(),
      "layer_norm_backward(dy, x, weight, mean, rstd, *, stream=None)\n--\n\n"
      R"doc(Gradients of layer_norm given its mean and rstd: returns (dx, dweight, dbias).
dweight and dbias are deterministic (the same bits on every run).)doc");
  m.def(
      "rms_norm", &rms_norm, py::arg("x"), py::arg("weight"), py::arg("eps") = 1e-6, py::kw_only(),
      py::arg("out") = py::none(), py::arg("return_rstd") = false, py::arg("stream") = py::none(),
      "rms_norm(x, weight, eps=1e-6, *, out=None, return_rstd=False, stream=None)\n--\n\n"
      R"doc(RMS normalisation over the last axis: x * rstd * weight, rstd = 1/sqrt(mean(x^2) + eps).
With return_rstd=True, returns (y, rstd), rstd float32 with x's leading shape.)doc");
  m.def(
      "rms_norm_backward",
      [](py::handle dy, py::handle x, py::handle weight, py::handle rstd, py::handle stream) {
        return norm_backward(false, dy, x, weight, py::none(), rstd, stream);
      },
      py::arg("dy"), py::arg("x"), py::arg("weight"), py::arg("rstd"), py::kw_only(),
      py::arg("stream") = py::none(),
      "rms_norm_backward(dy, x, weight, rstd, *, stream=None)\n--\n\n"
      R"doc(Gradients of rms_norm given its rstd: returns (dx, dweight), dweight deterministic.)doc");
  m.def("fused_add_rms_norm", &fused_add_rms_norm, py::arg("x"), py::arg("residual"),
        py::arg("weight"), py::arg("eps") = 1e-6, py::kw_only(), py::arg("stream") = py::none(),
        "fused_add_rms_norm(x, residual, weight, eps=1e-6, *, stream=None)\n--\n\n"
        R"doc(In place, as in a transformer block: residual += x (rounded to the dtype), then
x = rms_norm(residual) * weight. Returns (x, residual), the arrays given.)doc");
}

}  // namespace

CUDAOPS_PYTHON_OPS("rowwise", bind_rowwise);

}  // namespace cudaops::python
