// cudaops.add and cudaops.add_scalar.
#include "cudaops/elementwise.h"

#include "../array_import.h"
#include "../ops.h"

namespace cudaops::python {

namespace {

py::object add(py::handle a, py::handle b, py::handle out, py::handle stream) {
  CallContext ctx("add", stream);
  ArrayView va = ctx.import(a, "a", Access::kRead);
  ArrayView vb = ctx.import(b, "b", Access::kRead);
  ctx.require_floating(va);
  ctx.require_same_dtype(va, vb);
  ctx.require_same_shape(va, vb);
  ctx.require_contiguous(va);
  ctx.require_contiguous(vb);
  std::optional<ArrayView> vout = ctx.import_out(out, va);
  const ArrayView* pout = vout ? &*vout : nullptr;
  ctx.prepare({&va, &vb, pout});
  void* d_out = ctx.output_data(pout, va.shape, va.dtype);
  Status status;
  {
    py::gil_scoped_release nogil;
    status = cudaops::add(va.data, vb.data, d_out, va.size, va.dtype, ctx.stream());
  }
  check(status);
  return ctx.finish(out, a);
}

py::object add_scalar(py::handle a, double alpha, py::handle out, py::handle stream) {
  CallContext ctx("add_scalar", stream);
  ArrayView va = ctx.import(a, "a", Access::kRead);
  ctx.require_floating(va);
  ctx.require_contiguous(va);
  std::optional<ArrayView> vout = ctx.import_out(out, va);
  const ArrayView* pout = vout ? &*vout : nullptr;
  ctx.prepare({&va, pout});
  void* d_out = ctx.output_data(pout, va.shape, va.dtype);
  Status status;
  {
    py::gil_scoped_release nogil;
    status = cudaops::add_scalar(va.data, static_cast<float>(alpha), d_out, va.size, va.dtype,
                                 ctx.stream());
  }
  check(status);
  return ctx.finish(out, a);
}

void bind_elementwise(py::module_& m) {
  m.def("add", &add, py::arg("a"), py::arg("b"), py::kw_only(), py::arg("out") = py::none(),
        py::arg("stream") = py::none(),
        "add(a, b, *, out=None, stream=None)\n--\n\n"
        R"doc(a + b, elementwise, computed in float32 and rounded once to the dtype.

a and b: C-contiguous CUDA arrays of one shape and dtype (float32, float16 or bfloat16), from any
framework (DLPack or __cuda_array_interface__). out: written in place when given (it may be a or
b); otherwise the result is a new array of a's kind. stream: None (the legacy default stream), an
int handle, or a stream object (torch, CuPy, CUDA Python).)doc");
  m.def("add_scalar", &add_scalar, py::arg("a"), py::arg("alpha"), py::kw_only(),
        py::arg("out") = py::none(), py::arg("stream") = py::none(),
        "add_scalar(a, alpha, *, out=None, stream=None)\n--\n\n"
        R"doc(a + alpha, elementwise; alpha is taken as float32. Arguments as for add().)doc");
}

}  // namespace

CUDAOPS_PYTHON_OPS("elementwise", bind_elementwise);

}  // namespace cudaops::python
