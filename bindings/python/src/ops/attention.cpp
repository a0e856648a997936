// cudaops.attention_merge: partial attentions merged by their log-sum-exps.
#include <string>
#include <vector>

#include "../array_import.h"
#include "../ops.h"
#include "cudaops/attention.h"

namespace cudaops::python {

namespace {

py::tuple attention_merge(py::handle outs, py::handle lses, py::handle out, py::handle stream) {
  CallContext ctx("attention_merge", stream);
  if (py::isinstance<py::list>(outs) || py::isinstance<py::tuple>(outs)) {
    throw py::type_error(
        "attention_merge: outs: expected one array [parts, ..., dim] (stack the parts, e.g. "
        "torch.stack, or all_gather_into_tensor's output), got a sequence");
  }
  ArrayView vo = ctx.import(outs, "outs", Access::kRead);
  ArrayView vl = ctx.import(lses, "lses", Access::kRead);
  ctx.require_floating(vo);
  ctx.require_contiguous(vo);
  ctx.require_contiguous(vl);
  if (vo.shape.size() < 2) {
    throw py::value_error("attention_merge: outs: expected [parts, ..., dim], got shape " +
                          shape_text(vo.shape));
  }
  const std::vector<int64_t> lse_shape(vo.shape.begin(), vo.shape.end() - 1);
  if (vl.dtype != DType::kFloat32 || vl.shape != lse_shape) {
    throw py::value_error("attention_merge: lses: expected float32 of shape " +
                          shape_text(lse_shape) + " (outs' without its last axis), got " +
                          shape_text(vl.shape) + " of " + dtype_name(vl.dtype));
  }
  const int64_t parts = vo.shape[0], dim = vo.shape.back();
  int64_t rows = 1;
  for (size_t i = 1; i + 1 < vo.shape.size(); ++i)
    rows *= vo.shape[i];
  const std::vector<int64_t> out_shape(vo.shape.begin() + 1, vo.shape.end());
  std::optional<ArrayView> vout;
  if (!out.is_none()) {
    vout = ctx.import(out, "out", Access::kWrite);
    ctx.require_contiguous(*vout);
    if (vout->dtype != vo.dtype || vout->shape != out_shape) {
      throw py::value_error("attention_merge: out: expected shape " + shape_text(out_shape) +
                            " of " + dtype_name(vo.dtype) + ", got " + shape_text(vout->shape) +
                            " of " + dtype_name(vout->dtype));
    }
  }
  ctx.prepare({&vo, &vl, vout ? &*vout : nullptr});
  void* d_out = ctx.output_data(vout ? &*vout : nullptr, out_shape, vo.dtype);
  const std::vector<int64_t> merged_lse_shape(out_shape.begin(), out_shape.end() - 1);
  auto* d_lse = static_cast<float*>(ctx.output_data(nullptr, merged_lse_shape, DType::kFloat32));
  Status status;
  {
    py::gil_scoped_release nogil;
    status = cudaops::attention_merge(vo.data, static_cast<const float*>(vl.data), d_out, d_lse,
                                      parts, rows, dim, vo.dtype, ctx.stream());
  }
  check(status);
  py::object o = vout ? py::reinterpret_borrow<py::object>(out) : ctx.take_result(0, outs);
  return py::make_tuple(o, ctx.take_result(vout ? 0 : 1, outs));
}

void bind_attention(py::module_& m) {
  m.def("attention_merge", &attention_merge, py::arg("outs"), py::arg("lses"), py::kw_only(),
        py::arg("out") = py::none(), py::arg("stream") = py::none(),
        "attention_merge(outs, lses, *, out=None, stream=None)\n--\n\n"
        R"doc(The exact merge of partial attentions of the same queries over disjoint tokens:
outs [parts, ..., dim] (float32, float16 or bfloat16) and their log-sum-exps lses [parts, ...]
float32 (as Index.attention(..., return_lse=True) gives them) -> (out [..., dim], lse [...]),
out = sum_p exp(lse_p - lse) outs_p with lse = log(sum_p exp(lse_p)); a part at -inf weighs
nothing. The parts are added in order (the same bits every run). For context parallelism: each
rank attends its part of the sequence, one all_gather of (out, lse), then this.)doc");
}

}  // namespace

CUDAOPS_PYTHON_OPS("attention", bind_attention);

}  // namespace cudaops::python
