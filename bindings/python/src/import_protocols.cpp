// The protocols' importers: the DLPack C exchange API, __dlpack__ capsules (versioned, then
// legacy) and __cuda_array_interface__ (v2, v3).
#include <optional>
#include <string>

#include "import_detail.h"

namespace cudaops::python::detail {

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
  // The table is trusted only on a type that is a DLPack producer (has __dlpack__): an attribute
  // of that name on anything else is not taken as an address to call through.
  // The table comes only from a capsule of DLPack 1.3's name, under the attribute's name or its
  // earlier spelling: an integer or any other object there is never taken as an address.
  const bool producer = PyObject_HasAttrString(t, "__dlpack__") != 0;
  PyErr_Clear();
  for (const char* name : {"__dlpack_c_exchange_api__", "__c_dlpack_exchange_api__"}) {
    if (!producer || api != nullptr) break;
    if (PyObject* capsule = PyObject_GetAttrString(t, name)) {
      if (PyCapsule_IsValid(capsule, dl::kExchangeAPICapsule)) {
        api = static_cast<const dl::ExchangeAPI*>(
            PyCapsule_GetPointer(capsule, dl::kExchangeAPICapsule));
      }
      Py_DECREF(capsule);
    }
    PyErr_Clear();
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

namespace {

void fill_from_tensor(ArrayView& view, const dl::Tensor& tensor, Elements elements,
                      const char* op) {
  const std::string& name = view.name;
  require_cuda_device_type(tensor.device.device_type, op, name);
  if (tensor.device.device_id < 0) {
    throw py::value_error(prefix(op, name) + "DLPack device id " +
                          std::to_string(tensor.device.device_id) + " is negative");
  }
  view.device = tensor.device.device_id;
  set_dl_type(view, tensor.dtype, elements, op);
  // Every field is checked before it is read through: a producer's ndim is trusted no further
  // than kMaxDims, and shape/strides only when non-null.
  if (tensor.ndim < 0 || tensor.ndim > kMaxDims) {
    throw py::value_error(prefix(op, name) + "DLPack ndim " + std::to_string(tensor.ndim) +
                          " is outside [0, " + std::to_string(kMaxDims) + "]");
  }
  if (tensor.ndim > 0 && tensor.shape == nullptr) {
    throw py::value_error(prefix(op, name) + "DLPack tensor with " + std::to_string(tensor.ndim) +
                          " dimensions and no shape");
  }
  if (tensor.byte_offset > static_cast<uint64_t>(INT64_MAX)) {
    throw py::value_error(prefix(op, name) + "DLPack byte_offset " +
                          std::to_string(tensor.byte_offset) + " is not a valid offset");
  }
  view.shape.assign(tensor.shape, tensor.shape + tensor.ndim);
  if (tensor.strides == nullptr) {
    view.strides = contiguous_strides(view.shape);
  } else {
    view.strides.assign(tensor.strides, tensor.strides + tensor.ndim);
  }
  view.data = static_cast<char*>(tensor.data) + tensor.byte_offset;
}

}  // namespace

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
  // Producers (torch, the array API) export a CUDA array with a stream only while its device is
  // current: that device is made current around __dlpack__ (where CUDA answers and the device
  // exists; otherwise the checks that follow say what is wrong).
  std::optional<DeviceGuard> producer_device;
  if (py::hasattr(obj, "__dlpack_device__")) {
    py::object device = obj.attr("__dlpack_device__")();
    if (!PyTuple_Check(device.ptr()) || PyTuple_GET_SIZE(device.ptr()) != 2) {
      throw py::type_error(prefix(op, name) + "__dlpack_device__() must return (type, id)");
    }
    const int64_t type = as_int(PyTuple_GET_ITEM(device.ptr(), 0), op, name, "device type");
    require_cuda_device_type(static_cast<int32_t>(type), op, name);
    const int64_t id = as_int(PyTuple_GET_ITEM(device.ptr(), 1), op, name, "device id");
    int current = -1;
    int count = 0;
    if (type == dl::kCUDA && cudaGetDevice(&current) == cudaSuccess &&
        cudaGetDeviceCount(&count) == cudaSuccess) {
      if (id >= 0 && id < count && id != current) {
        producer_device.emplace(static_cast<int>(id), op);
      }
    } else {
      (void)cudaGetLastError();
    }
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
  if (!version) {
    throw py::type_error(prefix(op, name) + "__cuda_array_interface__ has no 'version'");
  }
  const int64_t v = as_int(version, op, name, "__cuda_array_interface__ 'version'");
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
  if (view.shape.size() > static_cast<size_t>(kMaxDims)) {
    throw py::value_error(prefix(op, name) + "__cuda_array_interface__ 'shape' has " +
                          std::to_string(view.shape.size()) + " dimensions; at most " +
                          std::to_string(kMaxDims) + " are supported");
  }
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
  const int64_t ptr =
      as_int(PyTuple_GET_ITEM(data.ptr(), 0), op, name, "__cuda_array_interface__ 'data'[0]");
  if (ptr < 0) {
    throw py::value_error(prefix(op, name) + "__cuda_array_interface__ 'data'[0] (the pointer) " +
                          std::to_string(ptr) + " is negative");
  }
  view.data = reinterpret_cast<void*>(static_cast<uintptr_t>(ptr));
  // The flag is a bool (ints taken too): its truth is asked of nothing that can run code.
  PyObject* readonly = PyTuple_GET_ITEM(data.ptr(), 1);
  if (!PyBool_Check(readonly) && !PyLong_Check(readonly)) {
    throw py::type_error(prefix(op, name) +
                         "__cuda_array_interface__ 'data'[1] (read_only) must be a bool, got " +
                         type_name(readonly));
  }
  view.readonly = readonly == Py_True || (!PyBool_Check(readonly) && PyLong_AsLong(readonly) != 0);
  PyErr_Clear();
  if (v >= 3) {
    py::object stream = get("stream");
    if (stream && !stream.is_none()) {
      const int64_t s = as_int(stream, op, name, "__cuda_array_interface__ 'stream'");
      // v3: 1 the legacy default stream, 2 the per-thread one, else a stream handle; 0 is
      // disallowed as ambiguous.
      if (s <= 0) {
        throw py::value_error(prefix(op, name) + "__cuda_array_interface__ 'stream' " +
                              std::to_string(s) +
                              " is not allowed; expected None, 1 (legacy default), 2 "
                              "(per-thread default) or a stream handle");
      }
      view.wait_cai_stream = true;
      view.cai_stream = stream_from_protocol_value(s);
    }
  }
  view.protocol = "__cuda_array_interface__";
}

}  // namespace cudaops::python::detail
