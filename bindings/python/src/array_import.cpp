#include "array_import.h"

#include <pybind11/stl.h>

#include <atomic>
#include <cctype>
#include <cstring>
#include <sstream>
#include <string>
#include <utility>

namespace cudaops::python {

namespace {

std::atomic<bool> g_fast_paths{true};

std::string prefix(const char* op, const std::string& name) {
  return std::string(op) + ": " + name + ": ";
}

std::string pointer_text(const void* ptr) {
  std::ostringstream text;
  text << "0x" << std::hex << reinterpret_cast<uintptr_t>(ptr);
  return text.str();
}

const char* dl_device_name(int32_t type) {
  switch (type) {
    case dl::kCPU:
      return "the CPU";
    case dl::kCUDAHost:
      return "CUDA pinned host memory";
    case dl::kROCM:
    case dl::kROCMHost:
      return "a ROCm device";
    case dl::kOpenCL:
      return "an OpenCL device";
    case dl::kVulkan:
      return "a Vulkan device";
    case dl::kMetal:
      return "a Metal device";
    case dl::kOneAPI:
      return "a oneAPI device";
    default:
      return nullptr;
  }
}

void require_cuda_device_type(int32_t type, const char* op, const std::string& name) {
  if (type == dl::kCUDA || type == dl::kCUDAManaged) return;
  const char* where = dl_device_name(type);
  std::string text = prefix(op, name) + "expected an array in CUDA device memory, got one on ";
  text += where != nullptr ? where : ("DLPack device type " + std::to_string(type));
  throw py::value_error(text);
}

std::string dl_dtype_text(dl::DataType t) {
  std::string base;
  switch (t.code) {
    case dl::kInt:
      base = "int";
      break;
    case dl::kUInt:
      base = "uint";
      break;
    case dl::kFloat:
      base = "float";
      break;
    case dl::kBfloat:
      base = "bfloat";
      break;
    case dl::kComplex:
      base = "complex";
      break;
    case dl::kBool:
      return "bool";
    default:
      return "DLPack type code " + std::to_string(t.code) + " with " + std::to_string(t.bits) +
             " bits";
  }
  std::string text = base + std::to_string(t.bits);
  if (t.lanes != 1) text += "x" + std::to_string(t.lanes);
  return text;
}

constexpr const char* kExpectedDtypes = "expected float32, float16, bfloat16, int32 or int64";

DType dtype_from_dl(dl::DataType t, const char* op, const std::string& name) {
  if (t.lanes == 1) {
    if (t.code == dl::kFloat && t.bits == 32) return DType::kFloat32;
    if (t.code == dl::kFloat && t.bits == 16) return DType::kFloat16;
    if (t.code == dl::kBfloat && t.bits == 16) return DType::kBFloat16;
    if (t.code == dl::kInt && t.bits == 32) return DType::kInt32;
    if (t.code == dl::kInt && t.bits == 64) return DType::kInt64;
  }
  throw py::type_error(prefix(op, name) + "dtype " + dl_dtype_text(t) + " is not supported; " +
                       kExpectedDtypes);
}

// Elements::kAny: any DLPack element type of a whole number of bytes, kept as its size.
void set_dl_type(ArrayView& view, dl::DataType t, Elements elements, const char* op) {
  view.type_text = dl_dtype_text(t);
  if (elements == Elements::kTyped) {
    view.dtype = dtype_from_dl(t, op, view.name);
    view.item_size = dtype_size(view.dtype);
    return;
  }
  const int64_t bits = static_cast<int64_t>(t.bits) * t.lanes;
  if (bits <= 0 || bits % 8 != 0) {
    throw py::type_error(prefix(op, view.name) + "dtype " + view.type_text +
                         " has no whole number of bytes per element");
  }
  view.item_size = bits / 8;
  view.typed = false;
}

DType dtype_from_typestr(const std::string& typestr, const char* op, const std::string& name) {
  // Little-endian ('<'), native ('=', little-endian on every CUDA host) or not applicable ('|').
  if (typestr.size() >= 3 && (typestr[0] == '<' || typestr[0] == '=' || typestr[0] == '|')) {
    const std::string body = typestr.substr(1);
    if (body == "f4") return DType::kFloat32;
    if (body == "f2") return DType::kFloat16;
    if (body == "i4") return DType::kInt32;
    if (body == "i8") return DType::kInt64;
  }
  throw py::type_error(prefix(op, name) + "typestr '" + typestr + "' is not supported; " +
                       "expected '<f4' (float32), '<f2' (float16), '<i4' (int32) or '<i8' "
                       "(int64); bfloat16 has no typestr and is taken through DLPack");
}

// Elements::kAny: any typestr ("<f8", "|u1", "|b1", "<c16", "|V12") whose size is given.
void set_typestr(ArrayView& view, const std::string& typestr, Elements elements, const char* op) {
  view.type_text = typestr;
  if (elements == Elements::kTyped) {
    view.dtype = dtype_from_typestr(typestr, op, view.name);
    view.item_size = dtype_size(view.dtype);
    return;
  }
  int64_t size = 0;
  const bool shaped = typestr.size() >= 3 && typestr.size() <= 8 &&
                      (typestr[0] == '<' || typestr[0] == '=' || typestr[0] == '|') &&
                      std::isalpha(static_cast<unsigned char>(typestr[1])) != 0;
  if (shaped) {
    for (size_t i = 2; i < typestr.size(); ++i) {
      if (std::isdigit(static_cast<unsigned char>(typestr[i])) == 0) {
        size = 0;
        break;
      }
      size = size * 10 + (typestr[i] - '0');
    }
  }
  if (size <= 0) {
    throw py::type_error(prefix(op, view.name) + "typestr '" + typestr +
                         "' is not supported; expected a little-endian type with its size in "
                         "bytes, such as '<f8' or '|u1'");
  }
  view.item_size = size;
  view.typed = false;
}

int64_t as_int(py::handle value, const char* op, const std::string& name, const char* what) {
  if (!PyLong_Check(value.ptr()) || PyBool_Check(value.ptr())) {
    throw py::type_error(prefix(op, name) + what + " must be an int, got " + type_name(value));
  }
  int overflow = 0;
  const long long v = PyLong_AsLongLongAndOverflow(value.ptr(), &overflow);
  if (overflow != 0) throw py::value_error(prefix(op, name) + what + " does not fit in int64");
  return static_cast<int64_t>(v);
}

std::vector<int64_t> int_tuple(py::handle value, const char* op, const std::string& name,
                               const char* what) {
  if (!PyTuple_Check(value.ptr()) && !PyList_Check(value.ptr())) {
    throw py::type_error(prefix(op, name) + what + " must be a tuple of ints, got " +
                         type_name(value));
  }
  std::vector<int64_t> result;
  for (py::handle item : value)
    result.push_back(as_int(item, op, name, what));
  return result;
}

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

// Direct reads of CuPy arrays (whose __dlpack__ and __cuda_array_interface__ cost several
// microseconds each): public attributes only; the stream ordering __dlpack__ would do is done in
// prepare(), after cupy.cuda.get_current_stream().
struct CupyHooks {
  PyObject* ndarray_type = nullptr;
  PyObject* dtypes[5] = {};  // numpy's dtype singletons: float32, float16, (none), int32, int64
  PyObject* int64_alt = nullptr;       // 'q', the other spelling of int64
  PyObject* current_stream = nullptr;  // cupy.cuda.get_current_stream
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
    hooks = h;
  } catch (py::error_already_set&) {
    failed = true;
  }
  return hooks;
}

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

// The type's DLPack C exchange API, or null. Cached per type; cached types are kept alive so
// that a cached address is never reused by another type.
const dl::ExchangeAPI* exchange_api_of(py::handle obj) {
  struct Entry {
    PyTypeObject* type;
    const dl::ExchangeAPI* api;
  };
  static Entry cache[16];
  static int used = 0;
  PyTypeObject* type = Py_TYPE(obj.ptr());
  for (int i = 0; i < used; ++i) {
    if (cache[i].type == type) return cache[i].api;
  }
  const dl::ExchangeAPI* api = nullptr;
  PyObject* t = reinterpret_cast<PyObject*>(type);
  if (PyObject* capsule = PyObject_GetAttrString(t, "__dlpack_c_exchange_api__")) {
    if (PyCapsule_IsValid(capsule, dl::kExchangeAPICapsule)) {
      api = static_cast<const dl::ExchangeAPI*>(
          PyCapsule_GetPointer(capsule, dl::kExchangeAPICapsule));
    }
    Py_DECREF(capsule);
  } else if (PyObject* address =
                 (PyErr_Clear(), PyObject_GetAttrString(t, "__c_dlpack_exchange_api__"))) {
    if (PyLong_Check(address)) api = static_cast<const dl::ExchangeAPI*>(PyLong_AsVoidPtr(address));
    Py_DECREF(address);
  }
  PyErr_Clear();
  // A newer major version keeps older tables on a chain.
  const dl::ExchangeAPIHeader* header = api != nullptr ? &api->header : nullptr;
  while (header != nullptr && header->version.major > dl::kMajorVersion)
    header = header->prev_api;
  api = header != nullptr && header->version.major == dl::kMajorVersion
            ? reinterpret_cast<const dl::ExchangeAPI*>(header)
            : nullptr;
  if (api != nullptr && (api->managed_tensor_from_py_object_no_sync == nullptr ||
                         api->current_work_stream == nullptr)) {
    api = nullptr;
  }
  if (used < 16) {
    Py_INCREF(t);
    cache[used++] = {type, api};
  }
  return api;
}

void fill_from_tensor(ArrayView& view, const dl::Tensor& tensor, Elements elements,
                      const char* op) {
  const std::string& name = view.name;
  require_cuda_device_type(tensor.device.device_type, op, name);
  view.device = tensor.device.device_id;
  set_dl_type(view, tensor.dtype, elements, op);
  if (tensor.ndim < 0 || (tensor.ndim > 0 && tensor.shape == nullptr)) {
    throw py::value_error(prefix(op, name) + "DLPack tensor with an invalid shape");
  }
  view.shape.assign(tensor.shape, tensor.shape + tensor.ndim);
  if (tensor.strides == nullptr) {
    view.strides = contiguous_strides(view.shape);
  } else {
    view.strides.assign(tensor.strides, tensor.strides + tensor.ndim);
  }
  view.data = static_cast<char*>(tensor.data) + tensor.byte_offset;
}

// Imports through the C exchange API; false (and no Python error) when the producer declines, so
// that the Python protocol reports why.
bool import_exchange(py::handle obj, const dl::ExchangeAPI* api, ArrayView& view, Access access,
                     Elements elements, const char* op) {
  if (access == Access::kRead && api->dltensor_from_py_object_no_sync != nullptr) {
    dl::Tensor tensor{};
    if (api->dltensor_from_py_object_no_sync(obj.ptr(), &tensor) != 0) {
      PyErr_Clear();
      return false;
    }
    // The DLTensor is valid until control returns to Python: everything is copied out here.
    fill_from_tensor(view, tensor, elements, op);
  } else {
    dl::ManagedTensorVersioned* managed = nullptr;
    if (api->managed_tensor_from_py_object_no_sync(obj.ptr(), &managed) != 0 ||
        managed == nullptr) {
      PyErr_Clear();
      return false;
    }
    view.versioned.reset(managed);
    view.readonly = (managed->flags & dl::kFlagReadOnly) != 0;
    fill_from_tensor(view, managed->dl_tensor, elements, op);
  }
  view.exchange_api = api;
  view.protocol = "DLPack C exchange API";
  return true;
}

void import_dlpack(py::handle obj, ArrayView& view, cudaStream_t stream, Elements elements,
                   const char* op) {
  const std::string& name = view.name;
  if (py::hasattr(obj, "__dlpack_device__")) {
    py::object device = obj.attr("__dlpack_device__")();
    if (!PyTuple_Check(device.ptr()) || PyTuple_GET_SIZE(device.ptr()) != 2) {
      throw py::type_error(prefix(op, name) + "__dlpack_device__() must return (type, id)");
    }
    const int64_t type = as_int(PyTuple_GET_ITEM(device.ptr(), 0), op, name, "device type");
    require_cuda_device_type(static_cast<int32_t>(type), op, name);
  }
  const int64_t stream_value = stream_protocol_value(stream);
  py::object capsule;
  py::object dlpack = obj.attr("__dlpack__");
  try {
    capsule = dlpack(py::arg("stream") = stream_value,
                     py::arg("max_version") = py::make_tuple(dl::kMajorVersion, dl::kMinorVersion));
  } catch (py::error_already_set& e) {
    // A producer without the versioned protocol does not know max_version.
    if (!e.matches(PyExc_TypeError)) throw;
    capsule = dlpack(py::arg("stream") = stream_value);
  }
  PyObject* cap = capsule.ptr();
  dl::Tensor* tensor = nullptr;
  if (PyCapsule_IsValid(cap, dl::kCapsuleVersioned)) {
    auto* managed =
        static_cast<dl::ManagedTensorVersioned*>(PyCapsule_GetPointer(cap, dl::kCapsuleVersioned));
    if (PyCapsule_SetName(cap, dl::kCapsuleVersionedUsed) != 0) throw py::error_already_set();
    view.versioned.reset(managed);  // released by the view from here on
    if (managed->version.major != dl::kMajorVersion) {
      throw py::value_error(
          prefix(op, name) + "DLPack version " + std::to_string(managed->version.major) + "." +
          std::to_string(managed->version.minor) + " is not supported (expected major version 1)");
    }
    view.readonly = (managed->flags & dl::kFlagReadOnly) != 0;
    tensor = &managed->dl_tensor;
  } else if (PyCapsule_IsValid(cap, dl::kCapsuleLegacy)) {
    auto* managed = static_cast<dl::ManagedTensor*>(PyCapsule_GetPointer(cap, dl::kCapsuleLegacy));
    if (PyCapsule_SetName(cap, dl::kCapsuleLegacyUsed) != 0) throw py::error_already_set();
    view.legacy.reset(managed);
    tensor = &managed->dl_tensor;
  } else {
    throw py::type_error(prefix(op, name) +
                         "__dlpack__() must return an unused \"dltensor\" or "
                         "\"dltensor_versioned\" capsule, got " +
                         type_name(capsule));
  }
  fill_from_tensor(view, *tensor, elements, op);
  view.protocol = view.versioned != nullptr ? "DLPack" : "DLPack (legacy)";
}

void import_cai(py::handle obj, ArrayView& view, Elements elements, const char* op) {
  const std::string& name = view.name;
  py::object cai_obj = obj.attr("__cuda_array_interface__");
  if (!PyDict_Check(cai_obj.ptr())) {
    throw py::type_error(prefix(op, name) + "__cuda_array_interface__ must be a dict, got " +
                         type_name(cai_obj));
  }
  py::dict cai = py::reinterpret_borrow<py::dict>(cai_obj);
  auto get = [&](const char* key) -> py::object {
    PyObject* item = PyDict_GetItemString(cai.ptr(), key);  // borrowed
    return item == nullptr ? py::object() : py::reinterpret_borrow<py::object>(item);
  };
  py::object version = get("version");
  const int64_t v = version ? as_int(version, op, name, "__cuda_array_interface__ 'version'") : -1;
  if (v != 2 && v != 3) {
    throw py::value_error(prefix(op, name) + "__cuda_array_interface__ version " +
                          std::to_string(v) + " is not supported (expected 2 or 3)");
  }
  py::object mask = get("mask");
  if (mask && !mask.is_none()) {
    throw py::value_error(prefix(op, name) +
                          "masked arrays (__cuda_array_interface__ 'mask') are not supported");
  }
  py::object typestr = get("typestr");
  if (!typestr || !PyUnicode_Check(typestr.ptr())) {
    throw py::type_error(prefix(op, name) + "__cuda_array_interface__ 'typestr' must be a str");
  }
  set_typestr(view, typestr.cast<std::string>(), elements, op);
  py::object shape = get("shape");
  if (!shape) throw py::type_error(prefix(op, name) + "__cuda_array_interface__ has no 'shape'");
  view.shape = int_tuple(shape, op, name, "__cuda_array_interface__ 'shape'");
  py::object strides = get("strides");
  if (!strides || strides.is_none()) {
    view.strides = contiguous_strides(view.shape);
  } else {
    std::vector<int64_t> bytes = int_tuple(strides, op, name, "__cuda_array_interface__ 'strides'");
    if (bytes.size() != view.shape.size()) {
      throw py::value_error(prefix(op, name) + "__cuda_array_interface__ 'strides' has " +
                            std::to_string(bytes.size()) + " entries for " +
                            std::to_string(view.shape.size()) + " dimensions");
    }
    const int64_t item = view.item_size;
    view.strides.resize(bytes.size());
    for (size_t i = 0; i < bytes.size(); ++i) {
      if (bytes[i] % item != 0) {
        throw py::value_error(prefix(op, name) + "stride of " + std::to_string(bytes[i]) +
                              " bytes is not a multiple of the " + std::to_string(item) +
                              "-byte element");
      }
      view.strides[i] = bytes[i] / item;
    }
  }
  py::object data = get("data");
  if (!data || !PyTuple_Check(data.ptr()) || PyTuple_GET_SIZE(data.ptr()) != 2) {
    throw py::type_error(prefix(op, name) +
                         "__cuda_array_interface__ 'data' must be a (pointer, read_only) tuple");
  }
  const int64_t ptr = as_int(PyTuple_GET_ITEM(data.ptr(), 0), op, name, "data pointer");
  view.data = reinterpret_cast<void*>(static_cast<uintptr_t>(ptr));
  view.readonly = PyObject_IsTrue(PyTuple_GET_ITEM(data.ptr(), 1)) == 1;
  if (v >= 3) {
    py::object stream = get("stream");
    if (stream && !stream.is_none()) {
      const int64_t s = as_int(stream, op, name, "__cuda_array_interface__ 'stream'");
      view.wait_cai_stream = true;
      view.cai_stream = stream_from_protocol_value(s);
    }
  }
  view.protocol = "__cuda_array_interface__";
}

}  // namespace

// ---------------------------------------------------------------------------------------------

bool ArrayView::c_contiguous() const {
  if (size == 0) return true;
  int64_t expected = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    if (shape[i] != 1 && strides[i] != expected) return false;
    expected *= shape[i];
  }
  return true;
}

CallContext::CallContext(const char* op, py::handle stream)
    : op_(op), stream_(parse_stream(stream, op)) {}

ArrayView CallContext::import(py::handle obj, const char* name, Access access, Elements elements) {
  ArrayView view;
  view.name = name;
  bool done = false;
  if (g_fast_paths.load(std::memory_order_relaxed)) {
    if (py::isinstance<Array>(obj)) {
      const Array& array = obj.cast<const Array&>();
      view.data = array.data();
      view.dtype = array.dtype();
      view.item_size = dtype_size(view.dtype);
      view.shape = array.shape();
      view.strides = contiguous_strides(view.shape);
      view.device = array.device();
      view.source_array = &array;
      view.protocol = "cudaops.Array";
      done = true;
    } else if (const dl::ExchangeAPI* api = exchange_api_of(obj)) {
      done = import_exchange(obj, api, view, access, elements, op_);
    } else if (is_plain_torch_tensor(obj)) {
      done = read_torch_tensor(obj, view);
    } else if (is_cupy_ndarray(obj)) {
      done = read_cupy_array(obj, view);
    }
  }
  if (!done && access == Access::kWrite) {
    py::handle type = reinterpret_cast<PyObject*>(Py_TYPE(obj.ptr()));
    const std::string module = py::str(type.attr("__module__"));
    if (module.rfind("jax", 0) == 0) {
      throw py::type_error(prefix(op_, name) +
                           "JAX arrays are immutable and cannot be written in place; call "
                           "without out= to get a new jax.Array");
    }
  }
  if (!done) {
    if (py::hasattr(obj, "__dlpack__")) {
      import_dlpack(obj, view, stream_.handle, elements, op_);
    } else if (py::hasattr(obj, "__cuda_array_interface__")) {
      import_cai(obj, view, elements, op_);
    } else {
      throw py::type_error(prefix(op_, name) +
                           "expected a CUDA array (an object with __dlpack__ or "
                           "__cuda_array_interface__), got " +
                           type_name(obj));
    }
  }
  view.size = checked_size(view.shape, op_, name);
  if (access == Access::kWrite && view.readonly) {
    throw py::value_error(prefix(op_, name) + "the array is read-only (" + view.protocol +
                          "); an output must be writable");
  }
  // The alignment an element needs: its size, or the largest power of two dividing it (a
  // 12-byte record is 4-byte aligned), at most 16 bytes.
  int64_t align = view.item_size & -view.item_size;
  if (align > 16) align = 16;
  if (view.size > 0 &&
      reinterpret_cast<uintptr_t>(view.data) % static_cast<uintptr_t>(align) != 0) {
    throw py::value_error(prefix(op_, name) + "data pointer " + pointer_text(view.data) +
                          " is not aligned to its " + std::to_string(view.item_size) + "-byte " +
                          (view.typed ? std::string(dtype_name(view.dtype)) : view.type_text) +
                          " elements");
  }
  if (view.size > 0 && view.data == nullptr) {
    throw py::value_error(prefix(op_, name) + "null data pointer for " + std::to_string(view.size) +
                          " elements");
  }
  return view;
}

std::optional<ArrayView> CallContext::import_out(py::handle out, const ArrayView& like) {
  if (out.is_none()) return std::nullopt;
  ArrayView view = import(out, "out", Access::kWrite);
  require_same_dtype(like, view);
  require_same_shape(like, view);
  require_contiguous(view);
  return view;
}

void CallContext::require_contiguous(const ArrayView& view) const {
  if (view.c_contiguous()) return;
  std::ostringstream text;
  text << op_ << ": " << view.name << ": expected a C-contiguous array, got shape "
       << shape_text(view.shape) << " with strides " << shape_text(view.strides)
       << " (in elements)";
  throw py::value_error(text.str());
}

void CallContext::require_same_shape(const ArrayView& reference, const ArrayView& view) const {
  if (reference.shape == view.shape) return;
  throw py::value_error(prefix(op_, view.name) + "shape " + shape_text(view.shape) +
                        " does not match " + reference.name + "'s shape " +
                        shape_text(reference.shape));
}

void CallContext::require_same_dtype(const ArrayView& reference, const ArrayView& view) const {
  if (reference.dtype == view.dtype) return;
  throw py::type_error(prefix(op_, view.name) + "dtype " + dtype_name(view.dtype) +
                       " does not match " + reference.name + "'s dtype " +
                       dtype_name(reference.dtype));
}

void CallContext::require_floating(const ArrayView& view) const {
  if (dtype_is_floating(view.dtype)) return;
  throw py::type_error(prefix(op_, view.name) + "dtype " + dtype_name(view.dtype) +
                       " is not supported; expected float32, float16 or bfloat16");
}

int CallContext::prepare(const std::vector<const ArrayView*>& arrays) {
  int device = -1;
  const ArrayView* first = nullptr;
  bool work = false;
  for (const ArrayView* view : arrays) {
    if (view == nullptr) continue;
    if (view->size > 0) work = true;
  }
  if (!work) {
    for (const ArrayView* view : arrays) {
      if (view != nullptr && view->device >= 0) {
        device = view->device;
        break;
      }
    }
    if (device < 0 && cudaGetDevice(&device) != cudaSuccess) {
      (void)cudaGetLastError();
      device = 0;
    }
    device_ = device;
    return device;
  }
  for (const ArrayView* view : arrays) {
    if (view == nullptr || view->size == 0) continue;
    int view_device = view->device;
    if (view_device < 0) {
      cudaPointerAttributes attributes{};
      check_cuda(cudaPointerGetAttributes(&attributes, view->data),
                 prefix(op_, view->name) + "cannot query pointer " + pointer_text(view->data));
      if (attributes.type != cudaMemoryTypeDevice && attributes.type != cudaMemoryTypeManaged) {
        throw py::value_error(prefix(op_, view->name) + "pointer " + pointer_text(view->data) +
                              (attributes.type == cudaMemoryTypeHost
                                   ? " is pinned host memory"
                                   : " is not CUDA memory (a CPU array?)") +
                              "; expected CUDA device memory");
      }
      view_device = attributes.device;
    }
    if (first == nullptr) {
      first = view;
      device = view_device;
    } else if (view_device != device) {
      throw py::value_error(prefix(op_, view->name) + "is on CUDA device " +
                            std::to_string(view_device) + " but " + first->name +
                            " is on CUDA device " + std::to_string(device) +
                            "; all arrays must be on one device");
    }
  }
  guard_.emplace(device, op_);
  device_ = device;
  bool torch_done = false;
  bool cupy_done = false;
  const dl::ExchangeAPI* api_done = nullptr;
  for (const ArrayView* view : arrays) {
    if (view == nullptr || view->size == 0) continue;
    if (view->wait_cai_stream) order_after(view->cai_stream, stream_.handle, op_);
    if (view->exchange_api != nullptr && view->exchange_api != api_done) {
      // What __dlpack__(stream=) would have done: the op's stream waits for the producer's
      // current stream.
      void* current = nullptr;
      if (view->exchange_api->current_work_stream(dl::kCUDA, device, &current) != 0) {
        throw py::error_already_set();
      }
      order_after(static_cast<cudaStream_t>(current), stream_.handle, op_);
      api_done = view->exchange_api;
    }
    if (view->wait_torch_stream && !torch_done) {
      order_after(torch_current_stream(device), stream_.handle, op_);
      torch_done = true;
    }
    if (view->wait_cupy_stream && !cupy_done) {
      // CuPy's current stream is per device; the guard made the arrays' device current.
      order_after(cupy_current_stream(), stream_.handle, op_);
      cupy_done = true;
    }
    if (view->source_array != nullptr) view->source_array->order_before(stream_.handle);
  }
  return device;
}

void* CallContext::output_data(const ArrayView* out, const std::vector<int64_t>& shape,
                               DType dtype) {
  if (out != nullptr) return out->data;
  results_.push_back(
      std::make_unique<Array>(shape, dtype, device_ < 0 ? 0 : device_, stream_.handle, op_));
  return results_.back()->data();
}

void* CallContext::scratch(size_t bytes) {
  if (bytes == 0) return nullptr;
  const auto words = static_cast<int64_t>((bytes + 3) / 4);
  scratch_.push_back(std::make_unique<Array>(std::vector<int64_t>{words}, DType::kFloat32,
                                             device_ < 0 ? 0 : device_, stream_.handle, op_));
  return scratch_.back()->data();
}

void CallContext::mark_done() {
  if (done_) return;
  done_ = true;
  for (auto& array : results_)
    array->mark_ready(stream_.handle, op_);
  // Scratch memory is freed after this event, that is after the op's work.
  for (auto& array : scratch_)
    array->mark_ready(stream_.handle, op_);
}

py::object CallContext::finish(py::handle out, py::handle like) {
  mark_done();
  if (!out.is_none()) return py::reinterpret_borrow<py::object>(out);
  return take_result(0, like);
}

py::object CallContext::take_result(size_t index, py::handle like) {
  mark_done();
  py::object array = py::cast(std::move(results_.at(index)));
  return as_kind_of(array, like);
}

py::object as_kind_of(py::object array, py::handle like) {
  if (py::isinstance<Array>(like)) return array;
  py::handle type = reinterpret_cast<PyObject*>(Py_TYPE(like.ptr()));
  const std::string module = py::str(type.attr("__module__"));
  const std::string top = module.substr(0, module.find('.'));
  PyObject* modules = PySys_GetObject("modules");
  auto loaded = [&](const char* name) -> py::object {
    PyObject* m = PyDict_GetItemString(modules, name);
    return m == nullptr ? py::object() : py::reinterpret_borrow<py::object>(m);
  };
  if (top == "torch") {
    if (py::object torch = loaded("torch")) return torch.attr("from_dlpack")(array);
  } else if (top == "cupy") {
    if (py::object cupy = loaded("cupy")) return cupy.attr("from_dlpack")(array);
  } else if (top == "jax" || top == "jaxlib") {
    if (loaded("jax")) return py::module_::import("jax.dlpack").attr("from_dlpack")(array);
  } else if (top == "numba") {
    if (loaded("numba")) return py::module_::import("numba.cuda").attr("as_cuda_array")(array);
  }
  return array;
}

void set_fast_paths(bool enabled) {
  g_fast_paths.store(enabled);
}
bool fast_paths() {
  return g_fast_paths.load();
}

DType parse_dtype_arg(py::handle obj, const char* op) {
  std::string text;
  if (PyUnicode_Check(obj.ptr())) {
    text = obj.cast<std::string>();
  } else {
    text = py::str(obj).cast<std::string>();  // numpy.dtype('float32'), torch.float32, ...
    const std::string torch_prefix = "torch.";
    if (text.rfind(torch_prefix, 0) == 0) text = text.substr(torch_prefix.size());
  }
  DType dtype = DType::kFloat32;
  Status status = parse_dtype(text, &dtype);
  if (!status.ok()) throw py::type_error(std::string(op) + ": dtype: " + status.message());
  return dtype;
}

// ---------------------------------------------------------------------------------------------

namespace {

std::atomic<int> g_test_deleter_calls{0};

struct TestTensor {
  std::vector<int64_t> shape;
  std::vector<int64_t> strides;
  union {
    dl::ManagedTensor legacy;
    dl::ManagedTensorVersioned versioned;
  };
};

void test_legacy_deleter(dl::ManagedTensor* self) {
  delete static_cast<TestTensor*>(self->manager_ctx);
  ++g_test_deleter_calls;
}

void test_versioned_deleter(dl::ManagedTensorVersioned* self) {
  delete static_cast<TestTensor*>(self->manager_ctx);
  ++g_test_deleter_calls;
}

}  // namespace

void bind_testing(py::module_& m) {
  py::module_ t = m.def_submodule(
      "_testing", "Stand-in DLPack tensors for tests that run without a GPU; never dereferenced.");
  t.def(
      "make_capsule",
      [](uintptr_t ptr, std::vector<int64_t> shape, std::optional<std::vector<int64_t>> strides,
         int type_code, int bits, int lanes, int device_type, int device_id, uint64_t byte_offset,
         bool versioned, bool readonly, int major) {
        auto* t = new TestTensor();
        t->shape = std::move(shape);
        if (strides) t->strides = *strides;
        dl::Tensor tensor{};
        tensor.data = reinterpret_cast<void*>(ptr);
        tensor.device = {device_type, device_id};
        tensor.ndim = static_cast<int32_t>(t->shape.size());
        tensor.dtype = {static_cast<uint8_t>(type_code), static_cast<uint8_t>(bits),
                        static_cast<uint16_t>(lanes)};
        tensor.shape = t->shape.data();
        tensor.strides = strides ? t->strides.data() : nullptr;
        tensor.byte_offset = byte_offset;
        if (versioned) {
          std::memset(&t->versioned, 0, sizeof(t->versioned));
          t->versioned.version = {static_cast<uint32_t>(major), 0};
          t->versioned.manager_ctx = t;
          t->versioned.deleter = test_versioned_deleter;
          t->versioned.flags = readonly ? dl::kFlagReadOnly : 0;
          t->versioned.dl_tensor = tensor;
          return make_dlpack_capsule(&t->versioned);
        }
        std::memset(&t->legacy, 0, sizeof(t->legacy));
        t->legacy.manager_ctx = t;
        t->legacy.deleter = test_legacy_deleter;
        t->legacy.dl_tensor = tensor;
        return make_dlpack_capsule(&t->legacy);
      },
      py::arg("ptr"), py::arg("shape"), py::arg("strides") = py::none(), py::arg("type_code") = 2,
      py::arg("bits") = 32, py::arg("lanes") = 1, py::arg("device_type") = 2,
      py::arg("device_id") = 0, py::arg("byte_offset") = 0, py::arg("versioned") = true,
      py::arg("readonly") = false, py::arg("major") = 1);
  t.def(
      "deleter_calls", []() { return g_test_deleter_calls.load(); },
      "How many stand-in tensors have been released so far.");
}

}  // namespace cudaops::python
