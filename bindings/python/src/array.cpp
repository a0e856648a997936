#include "array.h"

#include <pybind11/stl.h>

#include <cstring>
#include <limits>
#include <mutex>
#include <string>
#include <utility>

#include "dlpack.h"
#include "import_detail.h"

namespace cudaops::python {

namespace {

// The memory pools that arrays allocated here come from, one per device, made on first use and
// kept for the life of the process. Their release threshold is unbounded: memory freed by one
// call stays in the pool for the next, where the device's default pool (threshold 0) hands it
// back to the driver at every synchronisation, and the next call maps it again, which made
// allocating calls measurably slower (docs/history/results-log.md).
// empty_cache() hands the pools' unused memory back.
std::mutex pools_mutex;
std::vector<cudaMemPool_t> pools;  // by device; null where not made yet, or not supported

// The pool of `device`, or null where the device has none (the allocation then takes the
// device's current pool through cudaMallocAsync).
cudaMemPool_t pool_for(int device) {
  std::lock_guard<std::mutex> lock(pools_mutex);
  if (device < 0) return nullptr;
  if (static_cast<size_t>(device) >= pools.size()) pools.resize(static_cast<size_t>(device) + 1);
  if (pools[static_cast<size_t>(device)] != nullptr) return pools[static_cast<size_t>(device)];
  cudaMemPoolProps props{};
  props.allocType = cudaMemAllocationTypePinned;
  props.handleTypes = cudaMemHandleTypeNone;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = device;
  cudaMemPool_t pool = nullptr;
  if (cudaMemPoolCreate(&pool, &props) != cudaSuccess) {
    (void)cudaGetLastError();
    return nullptr;
  }
  uint64_t keep = std::numeric_limits<uint64_t>::max();
  if (cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep) != cudaSuccess) {
    (void)cudaGetLastError();
    (void)cudaMemPoolDestroy(pool);
    return nullptr;
  }
  pools[static_cast<size_t>(device)] = pool;
  return pool;
}

}  // namespace

void empty_cache() {
  std::lock_guard<std::mutex> lock(pools_mutex);
  for (cudaMemPool_t pool : pools) {
    if (pool == nullptr) continue;
    check_cuda(cudaMemPoolTrimTo(pool, 0), "cudaops.empty_cache: cudaMemPoolTrimTo");
  }
}

int64_t memory_reserved(int device) {
  cudaMemPool_t pool = nullptr;
  {
    std::lock_guard<std::mutex> lock(pools_mutex);
    if (device >= 0 && static_cast<size_t>(device) < pools.size())
      pool = pools[static_cast<size_t>(device)];
  }
  if (pool == nullptr) return 0;
  uint64_t bytes = 0;
  check_cuda(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReservedMemCurrent, &bytes),
             "cudaops.memory_reserved: cudaMemPoolGetAttribute");
  return static_cast<int64_t>(bytes);
}

Allocation::~Allocation() {
  if (ptr == nullptr && ready == nullptr) return;
  // Never throws: this can run from a DLPack deleter in any thread, or at interpreter exit after
  // the runtime has shut down, when there is nothing useful to report.
  int previous = -1;
  const bool have_previous = cudaGetDevice(&previous) == cudaSuccess;
  if (have_previous && previous != device) (void)cudaSetDevice(device);
  if (ready != nullptr) {
    if (ptr != nullptr) (void)cudaStreamWaitEvent(cudaStreamLegacy, ready, 0);
    (void)cudaEventDestroy(ready);
  }
  if (ptr != nullptr) (void)cudaFreeAsync(ptr, cudaStreamLegacy);
  if (have_previous && previous != device) (void)cudaSetDevice(previous);
  (void)cudaGetLastError();
}

int64_t checked_size(const std::vector<int64_t>& shape, const char* op, const char* name) {
  int64_t size = 1;
  for (int64_t extent : shape) {
    if (extent < 0) {
      throw py::value_error(std::string(op) + ": " + name + ": negative extent " +
                            std::to_string(extent) + " in the shape");
    }
    if (__builtin_mul_overflow(size, extent, &size)) {
      throw py::value_error(std::string(op) + ": " + name +
                            ": the number of elements overflows int64");
    }
  }
  return size;
}

Array::Array(std::vector<int64_t> shape, DType dtype, int device, cudaStream_t stream,
             const char* op)
    : memory_(std::make_shared<Allocation>()),
      shape_(std::move(shape)),
      dtype_(dtype),
      stream_(stream) {
  size_ = checked_size(shape_, op, "shape");
  memory_->device = device;
  int64_t bytes = 0;
  if (__builtin_mul_overflow(size_, dtype_size(dtype_), &bytes)) {
    throw py::value_error(std::string(op) + ": the result's size in bytes overflows int64");
  }
  if (bytes == 0) return;
  cudaError_t error;
  {
    py::gil_scoped_release nogil;
    cudaMemPool_t pool = pool_for(device);
    error = pool != nullptr
                ? cudaMallocFromPoolAsync(&memory_->ptr, static_cast<size_t>(bytes), pool, stream)
                : cudaMallocAsync(&memory_->ptr, static_cast<size_t>(bytes), stream);
  }
  if (error != cudaSuccess) {
    memory_->ptr = nullptr;
    check_cuda(error, std::string(op) + ": allocating " + std::to_string(bytes) +
                          " bytes on CUDA device " + std::to_string(device));
  }
}

namespace {

/// The id of the capture `stream` is in (0: not capturing).
cudaError_t capture_id(cudaStream_t stream, unsigned long long* id) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  *id = 0;
  const cudaError_t error = cudaStreamGetCaptureInfo(stream, &status, id);
  if (status != cudaStreamCaptureStatusActive) *id = 0;
  return error;
}

/// Records `event` on `stream`; inside a capture as an event-record node (so that it is a real
/// event at each replay, which streams outside the graph can wait for). *capture: the capture's
/// id, 0 outside one.
cudaError_t record(cudaEvent_t event, cudaStream_t stream, unsigned long long* capture) {
  if (const cudaError_t error = capture_id(stream, capture); error != cudaSuccess) return error;
  return *capture != 0 ? cudaEventRecordWithFlags(event, stream, cudaEventRecordExternal)
                       : cudaEventRecord(event, stream);
}

}  // namespace

void Array::mark_ready(cudaStream_t stream, const char* op) {
  stream_ = stream;
  if (memory_->ptr == nullptr) return;
  if (memory_->ready == nullptr) {
    check_cuda(cudaEventCreateWithFlags(&memory_->ready, cudaEventDisableTiming), op,
               ": cudaEventCreate");
  }
  memory_->waited_capture = 0;
  check_cuda(record(memory_->ready, stream, &memory_->ready_capture), op, ": cudaEventRecord");
}

void Array::mark_ready_noexcept(cudaStream_t stream) noexcept {
  stream_ = stream;
  if (memory_->ptr == nullptr) return;
  if (memory_->ready == nullptr &&
      cudaEventCreateWithFlags(&memory_->ready, cudaEventDisableTiming) != cudaSuccess) {
    memory_->ready = nullptr;
    // No event: the free waits for the whole stream instead.
    (void)cudaGetLastError();
    (void)cudaStreamSynchronize(stream);
    return;
  }
  memory_->waited_capture = 0;
  if (record(memory_->ready, stream, &memory_->ready_capture) != cudaSuccess) {
    (void)cudaGetLastError();
    (void)cudaStreamSynchronize(stream);
    (void)cudaGetLastError();
  }
}

void Array::order_before(cudaStream_t consumer) const {
  if (memory_->ready == nullptr || same_stream(consumer, stream_)) return;
  DeviceGuard guard(memory_->device, "cudaops.Array.__dlpack__");
  // Inside a capture (where querying an event is refused): the producer recorded in the same
  // capture is joined in the graph, through an event recorded now on its stream (`ready` is an
  // event-record node there); an event recorded elsewhere becomes an external wait node, which
  // each replay honours.
  unsigned long long capture = 0;
  check_cuda(capture_id(consumer, &capture),
             "cudaops.Array.__dlpack__: querying the consumer stream's capture");
  if (capture != 0 && capture == memory_->ready_capture) {
    order_after(stream_, consumer, "cudaops.Array.__dlpack__");
    return;
  }
  if (capture != 0 && capture == memory_->waited_capture && consumer == memory_->waited_stream) {
    return;
  }
  check_cuda(cudaStreamWaitEvent(consumer, memory_->ready,
                                 capture != 0 ? cudaEventWaitExternal : cudaEventWaitDefault),
             "cudaops.Array.__dlpack__: making the consumer's stream wait");
  memory_->waited_capture = capture;
  memory_->waited_stream = consumer;
}

dl::DataType dl_dtype(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return {dl::kFloat, 32, 1};
    case DType::kFloat16:
      return {dl::kFloat, 16, 1};
    case DType::kBFloat16:
      return {dl::kBfloat, 16, 1};
    case DType::kInt32:
      return {dl::kInt, 32, 1};
    case DType::kInt64:
      return {dl::kInt, 64, 1};
  }
  return {dl::kFloat, 32, 1};
}

namespace {

// What a DLPack export owns: a reference to the Array and the shape/strides arrays.
struct ExportContext {
  py::object owner;
  std::vector<int64_t> shape;
  std::vector<int64_t> strides;
  union {
    dl::ManagedTensor legacy;
    dl::ManagedTensorVersioned versioned;
  };
};

void release_context(ExportContext* context) {
  // Deleters may be called from threads that do not hold the GIL.
  py::gil_scoped_acquire gil;
  delete context;
}

void legacy_deleter(dl::ManagedTensor* self) {
  release_context(static_cast<ExportContext*>(self->manager_ctx));
}

void versioned_deleter(dl::ManagedTensorVersioned* self) {
  release_context(static_cast<ExportContext*>(self->manager_ctx));
}

const char* typestr(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return "<f4";
    case DType::kFloat16:
      return "<f2";
    case DType::kInt32:
      return "<i4";
    case DType::kInt64:
      return "<i8";
    case DType::kBFloat16:
      break;
  }
  return nullptr;
}

py::tuple shape_tuple(const Array& array) {
  py::tuple shape(array.shape().size());
  for (size_t i = 0; i < array.shape().size(); ++i)
    shape[i] = array.shape()[i];
  return shape;
}

py::object dlpack(const py::object& self, const py::object& stream, const py::object& max_version,
                  const py::object& dl_device, const py::object& copy) {
  const Array& array = self.cast<const Array&>();
  if (!dl_device.is_none()) {
    auto requested = dl_device.cast<std::pair<int, int>>();
    if (requested.first != dl::kCUDA || requested.second != array.device()) {
      PyErr_SetString(PyExc_BufferError,
                      "cudaops.Array.__dlpack__: the array lives on its CUDA device and cannot "
                      "be exported to another device");
      throw py::error_already_set();
    }
  }
  if (!copy.is_none() && copy.cast<bool>()) {
    PyErr_SetString(PyExc_BufferError,
                    "cudaops.Array.__dlpack__: copy=True is not supported; the export is "
                    "zero-copy");
    throw py::error_already_set();
  }
  // The consumer's stream waits for the op that produced the array (-1: the consumer orders it).
  // DLPack for CUDA: None or 1 the legacy default stream, 2 the per-thread one, -1 no ordering,
  // any other positive value a stream handle; 0 is disallowed as ambiguous.
  int64_t stream_value = 1;
  if (!stream.is_none()) {
    stream_value = detail::as_int(stream, "cudaops.Array.__dlpack__", "stream", "the value");
    if (stream_value == 0 || stream_value < -1) {
      throw py::value_error(
          "cudaops.Array.__dlpack__: stream " + std::to_string(stream_value) +
          " is not allowed for CUDA; expected None, -1 (no ordering), 1 (legacy default), 2 "
          "(per-thread default) or a stream handle");
    }
  }
  if (stream_value != -1) array.order_before(stream_from_protocol_value(stream_value));

  bool versioned = false;
  if (!max_version.is_none()) {
    auto version = max_version.cast<std::pair<int, int>>();
    versioned = version.first >= static_cast<int>(dl::kMajorVersion);
  }

  auto* context = new ExportContext();
  context->owner = self;
  context->shape = array.shape();
  context->strides = contiguous_strides(context->shape);
  dl::Tensor tensor{};
  tensor.data = array.data();
  tensor.device = {dl::kCUDA, array.device()};
  tensor.ndim = static_cast<int32_t>(context->shape.size());
  tensor.dtype = dl_dtype(array.dtype());
  tensor.shape = context->shape.data();
  tensor.strides = context->strides.data();
  tensor.byte_offset = 0;

  if (versioned) {
    std::memset(&context->versioned, 0, sizeof(context->versioned));
    context->versioned.version = {dl::kMajorVersion, dl::kMinorVersion};
    context->versioned.manager_ctx = context;
    context->versioned.deleter = versioned_deleter;
    context->versioned.flags = 0;
    context->versioned.dl_tensor = tensor;
    return make_dlpack_capsule(&context->versioned);
  }
  std::memset(&context->legacy, 0, sizeof(context->legacy));
  context->legacy.manager_ctx = context;
  context->legacy.deleter = legacy_deleter;
  context->legacy.dl_tensor = tensor;
  return make_dlpack_capsule(&context->legacy);
}

py::dict cuda_array_interface(const Array& array) {
  const char* type = typestr(array.dtype());
  if (type == nullptr) {
    // An AttributeError, so that a consumer probing with hasattr() moves on to DLPack.
    throw py::attribute_error(
        "cudaops.Array: bfloat16 has no __cuda_array_interface__ typestr; use DLPack "
        "(__dlpack__) instead");
  }
  py::dict cai;
  cai["shape"] = shape_tuple(array);
  cai["typestr"] = type;
  cai["data"] = py::make_tuple(reinterpret_cast<uintptr_t>(array.data()), false);
  cai["version"] = 3;
  cai["strides"] = py::none();
  // The stream the contents are produced on: a consumer synchronises with it before use.
  if (array.data() == nullptr) {
    cai["stream"] = py::none();
  } else {
    cai["stream"] = stream_protocol_value(array.stream());
  }
  return cai;
}

std::string repr(const Array& array) {
  return "cudaops.Array(shape=" + shape_text(array.shape()) +
         ", dtype=" + dtype_name(array.dtype()) + ", device=" + std::to_string(array.device()) +
         ")";
}

}  // namespace

namespace {

// A capsule that nobody consumed still owns its tensor.
void legacy_capsule_destructor(PyObject* capsule) {
  if (PyCapsule_IsValid(capsule, dl::kCapsuleLegacy)) {
    dl::Release()(
        static_cast<dl::ManagedTensor*>(PyCapsule_GetPointer(capsule, dl::kCapsuleLegacy)));
  }
  PyErr_Clear();
}

void versioned_capsule_destructor(PyObject* capsule) {
  if (PyCapsule_IsValid(capsule, dl::kCapsuleVersioned)) {
    dl::Release()(static_cast<dl::ManagedTensorVersioned*>(
        PyCapsule_GetPointer(capsule, dl::kCapsuleVersioned)));
  }
  PyErr_Clear();
}

}  // namespace

py::object make_dlpack_capsule(dl::ManagedTensor* tensor) {
  PyObject* capsule = PyCapsule_New(tensor, dl::kCapsuleLegacy, legacy_capsule_destructor);
  if (capsule == nullptr) {
    dl::Release()(tensor);
    throw py::error_already_set();
  }
  return py::reinterpret_steal<py::object>(capsule);
}

py::object make_dlpack_capsule(dl::ManagedTensorVersioned* tensor) {
  PyObject* capsule = PyCapsule_New(tensor, dl::kCapsuleVersioned, versioned_capsule_destructor);
  if (capsule == nullptr) {
    dl::Release()(tensor);
    throw py::error_already_set();
  }
  return py::reinterpret_steal<py::object>(capsule);
}

DType parse_dtype_arg(py::handle obj, const char* op);

void bind_array(py::module_& m) {
  py::class_<Array>(m, "Array", R"doc(
Device memory owned by cudaops: what an op returns when no framework array was passed in.

Frameworks take it without a copy: torch.from_dlpack, cupy.from_dlpack, jax.dlpack.from_dlpack
(through __dlpack__) and numba.cuda.as_cuda_array (through __cuda_array_interface__, all dtypes but
bfloat16). Array(shape, dtype="float32", device=None, stream=None) allocates uninitialised memory,
for example to pass as out=.
)doc")
      .def(
          py::init([](std::vector<int64_t> shape, py::handle dtype, const py::object& device,
                      py::handle stream) {
            const char* op = "cudaops.Array";
            DType parsed = parse_dtype_arg(dtype, op);
            StreamArg s = parse_stream(stream, op);
            int dev = 0;
            if (device.is_none()) {
              check_cuda(cudaGetDevice(&dev), std::string(op) + ": CUDA is not available");
            } else {
              // A device ordinal: an int from 0 below the device count (DeviceGuard checks the
              // count); anything else is refused naming `device`.
              const int64_t d = int_arg(device, op, "device");
              if (d < 0 || d > INT32_MAX) {
                throw py::value_error(std::string(op) +
                                      ": device must be a CUDA device ordinal >= 0, got " +
                                      std::to_string(d));
              }
              dev = static_cast<int>(d);
            }
            checked_size(shape, op, "shape");
            DeviceGuard guard(dev, op);
            auto array = std::make_unique<Array>(std::move(shape), parsed, dev, s.handle, op);
            array->mark_ready(s.handle, op);
            return array;
          }),
          py::arg("shape"), py::arg("dtype") = "float32", py::kw_only(),
          py::arg("device") = py::none(), py::arg("stream") = py::none(),
          "__init__(self, shape, dtype='float32', *, device=None, stream=None)\n--\n\n"
          "Uninitialised memory of shape x dtype on `device` (None: the current one), allocated in "
          "the order of `stream` (None: the legacy default stream).")
      .def_property_readonly("shape", &shape_tuple)
      .def_property_readonly(
          "dtype", [](const Array& a) { return dtype_name(a.dtype()); },
          "The dtype's name: float32, float16, bfloat16, int32 or int64.")
      .def_property_readonly("device", &Array::device, "The CUDA device ordinal.")
      .def_property_readonly("ndim", [](const Array& a) { return a.shape().size(); })
      .def_property_readonly("size", &Array::size)
      .def_property_readonly("nbytes", &Array::nbytes)
      .def_property_readonly(
          "ptr", [](const Array& a) { return reinterpret_cast<uintptr_t>(a.data()); },
          "The device address of the first element.")
      .def("__len__",
           [](const Array& a) {
             if (a.shape().empty()) throw py::type_error("len() of a 0-d cudaops.Array");
             return a.shape()[0];
           })
      .def("__repr__", &repr)
      .def("__dlpack__", &dlpack, py::kw_only(), py::arg("stream") = py::none(),
           py::arg("max_version") = py::none(), py::arg("dl_device") = py::none(),
           py::arg("copy") = py::none(),
           "__dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None)\n--\n\n")
      .def(
          "__dlpack_device__",
          [](const Array& a) { return py::make_tuple(static_cast<int>(dl::kCUDA), a.device()); },
          "__dlpack_device__(self)\n--\n\n")
      .def_property_readonly("__cuda_array_interface__", &cuda_array_interface);
}

}  // namespace cudaops::python
