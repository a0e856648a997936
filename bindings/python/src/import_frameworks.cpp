// Direct reads of torch tensors and CuPy arrays through their public attributes, without the
// per-call cost of their protocols' Python methods; anything unexpected goes to the protocols.
#include <atomic>
#include <string>

#include "import_detail.h"

namespace cudaops::python {
namespace {
std::atomic<bool> g_fast_paths{true};
}  // namespace

void set_fast_paths(bool enabled) {
  g_fast_paths.store(enabled);
}
bool fast_paths() {
  return g_fast_paths.load();
}

namespace detail {

namespace {

constexpr DType kDtypeOrder[5] = {DType::kFloat32, DType::kFloat16, DType::kBFloat16, DType::kInt32,
                                  DType::kInt64};

// The position of `dtype` among a framework's dtype objects (in kDtypeOrder), compared by
// identity; -1 when it is none of them.
int match_dtype(PyObject* dtype, PyObject* const (&known)[5]) {
  for (int i = 0; i < 5; ++i) {
    if (known[i] != nullptr && dtype == known[i]) return i;
  }
  return -1;
}

// Shape and strides from a framework's tuples; strides are divided by `stride_unit` (the item
// size for strides in bytes). False when they do not look as expected, so that the protocol
// path reports it.
bool read_extents(PyObject* shape, PyObject* strides, int64_t stride_unit, ArrayView& view) {
  if (!PyTuple_Check(shape) || !PyTuple_Check(strides)) return false;
  const Py_ssize_t ndim = PyTuple_GET_SIZE(shape);
  if (PyTuple_GET_SIZE(strides) != ndim) return false;
  view.shape.resize(ndim);
  view.strides.resize(ndim);
  for (Py_ssize_t i = 0; i < ndim; ++i) {
    view.shape[i] = PyLong_AsLongLong(PyTuple_GET_ITEM(shape, i));
    const long long stride = PyLong_AsLongLong(PyTuple_GET_ITEM(strides, i));
    if (stride % stride_unit != 0) return false;
    view.strides[i] = stride / stride_unit;
  }
  if (PyErr_Occurred()) throw py::error_already_set();
  return true;
}

// A new reference to obj.name (or obj.name()), throwing on failure.
py::object get_attr(py::handle obj, PyObject* name) {
  PyObject* value = PyObject_GetAttr(obj.ptr(), name);
  if (value == nullptr) throw py::error_already_set();
  return py::reinterpret_steal<py::object>(value);
}

py::object call_method(py::handle obj, PyObject* name) {
  PyObject* value = PyObject_CallMethodNoArgs(obj.ptr(), name);
  if (value == nullptr) throw py::error_already_set();
  return py::reinterpret_steal<py::object>(value);
}

// Direct reads of torch tensors, without the cost of Tensor.__dlpack__ (a Python method that
// creates stream objects on every call), for a torch without the DLPack C exchange API. Only
// public attributes are read; the stream ordering that __dlpack__ would do is done in prepare().
struct TorchHooks {
  PyObject* tensor_type = nullptr;
  PyObject* parameter_type = nullptr;
  PyObject* strided = nullptr;
  PyObject* dtypes[5] = {};
  PyObject* raw_stream = nullptr;  // torch._C._cuda_getCurrentRawStream, when it exists
  PyObject* cuda = nullptr;        // torch.cuda
};

TorchHooks* torch_hooks() {
  static TorchHooks* hooks = nullptr;
  static bool failed = false;
  if (hooks != nullptr || failed) return hooks;
  PyObject* modules = PySys_GetObject("modules");  // borrowed
  if (modules == nullptr) return nullptr;
  PyObject* torch = PyDict_GetItemString(modules, "torch");  // borrowed
  if (torch == nullptr) return nullptr;
  try {
    py::handle t(torch);
    auto* h = new TorchHooks();
    auto keep = [](py::object o) { return o.release().ptr(); };
    h->tensor_type = keep(t.attr("Tensor"));
    h->parameter_type = keep(t.attr("nn").attr("Parameter"));
    h->strided = keep(t.attr("strided"));
    const char* names[5] = {"float32", "float16", "bfloat16", "int32", "int64"};
    for (int i = 0; i < 5; ++i)
      h->dtypes[i] = keep(t.attr(names[i]));
    h->cuda = keep(t.attr("cuda"));
    py::object c = t.attr("_C");
    if (py::hasattr(c, "_cuda_getCurrentRawStream")) {
      h->raw_stream = keep(c.attr("_cuda_getCurrentRawStream"));
    }
    hooks = h;
  } catch (py::error_already_set&) {
    // A torch that does not look like one we know: use the protocols.
    failed = true;
  }
  return hooks;
}

}  // namespace

bool is_plain_torch_tensor(py::handle obj) {
  TorchHooks* h = torch_hooks();
  if (h == nullptr) return false;
  PyObject* type = reinterpret_cast<PyObject*>(Py_TYPE(obj.ptr()));
  return type == h->tensor_type || type == h->parameter_type;
}

// Fills `view` from a torch tensor's attributes; false when the tensor is anything but a plain
// strided CUDA tensor of a supported dtype, so that the protocol path reports it.
bool read_torch_tensor(py::handle obj, ArrayView& view) {
  TorchHooks* h = torch_hooks();
  // Interned names: each lookup is then a pointer-keyed one.
  static PyObject* const is_cuda_name = PyUnicode_InternFromString("is_cuda");
  static PyObject* const layout_name = PyUnicode_InternFromString("layout");
  static PyObject* const requires_grad_name = PyUnicode_InternFromString("requires_grad");
  static PyObject* const dtype_name_ = PyUnicode_InternFromString("dtype");
  static PyObject* const shape_name = PyUnicode_InternFromString("shape");
  static PyObject* const stride_name = PyUnicode_InternFromString("stride");
  static PyObject* const data_ptr_name = PyUnicode_InternFromString("data_ptr");
  static PyObject* const get_device_name = PyUnicode_InternFromString("get_device");
  if (get_attr(obj, is_cuda_name).ptr() != Py_True) return false;
  if (get_attr(obj, layout_name).ptr() != h->strided) return false;
  // torch refuses to export a tensor that requires grad; the protocol path reports it.
  if (get_attr(obj, requires_grad_name).ptr() == Py_True) return false;
  const int found = match_dtype(get_attr(obj, dtype_name_).ptr(), h->dtypes);
  if (found < 0) return false;
  view.dtype = kDtypeOrder[found];
  view.item_size = dtype_size(view.dtype);
  if (!read_extents(get_attr(obj, shape_name).ptr(), call_method(obj, stride_name).ptr(), 1,
                    view)) {
    return false;
  }
  view.data = reinterpret_cast<void*>(
      static_cast<uintptr_t>(PyLong_AsUnsignedLongLong(call_method(obj, data_ptr_name).ptr())));
  view.device = static_cast<int>(PyLong_AsLong(call_method(obj, get_device_name).ptr()));
  if (PyErr_Occurred()) throw py::error_already_set();
  view.wait_torch_stream = true;
  view.protocol = "torch";
  return true;
}

namespace {

// Direct reads of CuPy arrays (whose __dlpack__ and __cuda_array_interface__ cost several
// microseconds each): public attributes only; the stream ordering __dlpack__ would do is done in
// prepare(), after cupy.cuda.get_current_stream().
struct CupyHooks {
  PyObject* ndarray_type = nullptr;
  PyObject* dtypes[5] = {};  // numpy's dtype singletons: float32, float16, (none), int32, int64
  PyObject* int64_alt = nullptr;       // 'q', the other spelling of int64
  PyObject* current_stream = nullptr;  // cupy.cuda.get_current_stream
  PyObject* empty = nullptr;           // cupy.empty
};

CupyHooks* cupy_hooks() {
  static CupyHooks* hooks = nullptr;
  static bool failed = false;
  if (hooks != nullptr || failed) return hooks;
  PyObject* modules = PySys_GetObject("modules");
  if (modules == nullptr) return nullptr;
  PyObject* cupy = PyDict_GetItemString(modules, "cupy");
  PyObject* numpy = PyDict_GetItemString(modules, "numpy");
  if (cupy == nullptr || numpy == nullptr) return nullptr;
  try {
    py::handle cp(cupy);
    py::handle np(numpy);
    auto* h = new CupyHooks();
    auto keep = [](py::object o) { return o.release().ptr(); };
    h->ndarray_type = keep(cp.attr("ndarray"));
    py::object dtype = np.attr("dtype");
    h->dtypes[0] = keep(dtype("float32"));
    h->dtypes[1] = keep(dtype("float16"));
    h->dtypes[3] = keep(dtype("int32"));
    h->dtypes[4] = keep(dtype("int64"));
    h->int64_alt = keep(dtype("q"));
    h->current_stream = keep(cp.attr("cuda").attr("get_current_stream"));
    h->empty = keep(cp.attr("empty"));
    hooks = h;
  } catch (py::error_already_set&) {
    failed = true;
  }
  return hooks;
}

}  // namespace

bool is_cupy_ndarray(py::handle obj) {
  CupyHooks* h = cupy_hooks();
  return h != nullptr && reinterpret_cast<PyObject*>(Py_TYPE(obj.ptr())) == h->ndarray_type;
}

bool read_cupy_array(py::handle obj, ArrayView& view) {
  CupyHooks* h = cupy_hooks();
  static PyObject* const data_name = PyUnicode_InternFromString("data");
  static PyObject* const ptr_name = PyUnicode_InternFromString("ptr");
  static PyObject* const device_id_name = PyUnicode_InternFromString("device_id");
  static PyObject* const dtype_name_ = PyUnicode_InternFromString("dtype");
  static PyObject* const shape_name = PyUnicode_InternFromString("shape");
  static PyObject* const strides_name = PyUnicode_InternFromString("strides");
  py::object dtype = get_attr(obj, dtype_name_);
  const int found = dtype.ptr() == h->int64_alt ? 4 : match_dtype(dtype.ptr(), h->dtypes);
  if (found < 0) return false;
  view.dtype = kDtypeOrder[found];
  view.item_size = dtype_size(view.dtype);
  // CuPy's strides are in bytes.
  if (!read_extents(get_attr(obj, shape_name).ptr(), get_attr(obj, strides_name).ptr(),
                    dtype_size(view.dtype), view)) {
    return false;
  }
  py::object memory = get_attr(obj, data_name);
  view.data = reinterpret_cast<void*>(
      static_cast<uintptr_t>(PyLong_AsUnsignedLongLong(get_attr(memory, ptr_name).ptr())));
  view.device = static_cast<int>(PyLong_AsLong(get_attr(memory, device_id_name).ptr()));
  if (PyErr_Occurred()) throw py::error_already_set();
  view.wait_cupy_stream = true;
  view.protocol = "cupy";
  return true;
}

py::object cupy_empty(const std::vector<int64_t>& shape, DType dtype, void** data) {
  static PyObject* const data_name = PyUnicode_InternFromString("data");
  static PyObject* const ptr_name = PyUnicode_InternFromString("ptr");
  CupyHooks* h = cupy_hooks();
  int found = -1;
  for (int i = 0; i < 5; ++i) {
    if (kDtypeOrder[i] == dtype) found = i;
  }
  if (h == nullptr || found < 0 || h->dtypes[found] == nullptr) return py::object();
  py::tuple extents(shape.size());
  for (size_t i = 0; i < shape.size(); ++i)
    extents[i] = py::int_(shape[i]);
  PyObject* array =
      PyObject_CallFunctionObjArgs(h->empty, extents.ptr(), h->dtypes[found], nullptr);
  if (array == nullptr) throw py::error_already_set();
  py::object result = py::reinterpret_steal<py::object>(array);
  py::object memory = get_attr(result, data_name);
  *data = reinterpret_cast<void*>(
      static_cast<uintptr_t>(PyLong_AsUnsignedLongLong(get_attr(memory, ptr_name).ptr())));
  if (PyErr_Occurred()) throw py::error_already_set();
  return result;
}

cudaStream_t cupy_current_stream() {
  py::object stream = py::reinterpret_borrow<py::object>(cupy_hooks()->current_stream)();
  return reinterpret_cast<cudaStream_t>(static_cast<intptr_t>(stream.attr("ptr").cast<int64_t>()));
}

cudaStream_t torch_current_stream(int device) {
  TorchHooks* h = torch_hooks();
  py::object value;
  if (h->raw_stream != nullptr) {
    value = py::reinterpret_borrow<py::object>(h->raw_stream)(device);
  } else {
    value = py::reinterpret_borrow<py::object>(h->cuda).attr("current_stream")(device).attr(
        "cuda_stream");
  }
  return reinterpret_cast<cudaStream_t>(static_cast<intptr_t>(value.cast<int64_t>()));
}

}  // namespace detail
}  // namespace cudaops::python
