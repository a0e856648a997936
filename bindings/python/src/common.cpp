#include "common.h"

#include <sstream>
#include <vector>

namespace cudaops::python {

namespace {

/// `text` as valid UTF-8: a message may quote a path of any bytes, and Python decodes exception
/// messages strictly; undecodable bytes become \\xNN escapes.
std::string printable(const std::string& text) {
  PyObject* decoded =
      PyUnicode_DecodeUTF8(text.data(), static_cast<Py_ssize_t>(text.size()), "backslashreplace");
  if (decoded == nullptr) {
    PyErr_Clear();
    return "(a message that is not text)";
  }
  Py_ssize_t size = 0;
  const char* utf8 = PyUnicode_AsUTF8AndSize(decoded, &size);
  std::string out = utf8 != nullptr ? std::string(utf8, static_cast<size_t>(size)) : std::string();
  if (utf8 == nullptr) PyErr_Clear();
  Py_DECREF(decoded);
  return out;
}

}  // namespace

[[noreturn]] void throw_status(const Status& status) {
  const std::string text = printable(status.message());
  switch (status.code()) {
    case StatusCode::kUnsupportedDtype:
      throw py::type_error(text);
    case StatusCode::kInvalidArgument:
    case StatusCode::kMisaligned:
    case StatusCode::kWorkspaceTooSmall:
      throw py::value_error(text);
    case StatusCode::kNotSupported:
      PyErr_SetString(PyExc_NotImplementedError, text.c_str());
      throw py::error_already_set();
    case StatusCode::kCudaError:
      throw CudaError(text);
    case StatusCode::kCompileError:
      throw CompileError(text);
    case StatusCode::kFileError:
      PyErr_SetString(PyExc_OSError, text.c_str());
      throw py::error_already_set();
    case StatusCode::kOutOfMemory:
      PyErr_SetString(PyExc_MemoryError, text.c_str());
      throw py::error_already_set();
    case StatusCode::kSuccess:
      break;
  }
  throw std::runtime_error(text);
}

void check_cuda(cudaError_t error, const std::string& context) {
  if (error == cudaSuccess) return;
  (void)cudaGetLastError();
  throw CudaError(context + ": " + cudaGetErrorName(error) + ": " + cuda_error_description(error));
}

DeviceGuard::DeviceGuard(int device, const char* op) {
  const cudaError_t error = cudaGetDevice(&previous_);
  if (error == cudaErrorInsufficientDriver || error == cudaErrorNoDevice) {
    check_cuda(error, std::string(op) +
                          ": CUDA is not available (no NVIDIA GPU, or no driver recent enough "
                          "for CUDA " +
                          std::to_string(CUDART_VERSION / 1000) + "." +
                          std::to_string(CUDART_VERSION % 1000 / 10) + ")");
  }
  check_cuda(error, op, ": CUDA is not available");
  if (previous_ != device) {
    check_cuda(cudaSetDevice(device),
               std::string(op) + ": cannot use CUDA device " + std::to_string(device));
    switched_ = true;
  }
}

DeviceGuard::~DeviceGuard() {
  if (switched_) {
    if (cudaSetDevice(previous_) != cudaSuccess) (void)cudaGetLastError();
  }
}

namespace {

int64_t stream_value_of(py::handle value, const char* op, const char* what) {
  if (!PyLong_Check(value.ptr()) || PyBool_Check(value.ptr())) {
    throw py::type_error(std::string(op) + ": stream: " + what + " must be an int, got " +
                         type_name(value));
  }
  int overflow = 0;
  const long long v = PyLong_AsLongLongAndOverflow(value.ptr(), &overflow);
  if (overflow != 0 || v < 0) {
    throw py::value_error(std::string(op) + ": stream: " + what +
                          " must be a non-negative stream handle");
  }
  return static_cast<int64_t>(v);
}

}  // namespace

int64_t int_arg(py::handle obj, const char* op, const char* what) {
  if (!PyLong_Check(obj.ptr()) || PyBool_Check(obj.ptr())) {
    throw py::type_error(std::string(op) + ": " + what + " must be an int, got " + type_name(obj));
  }
  int overflow = 0;
  const long long v = PyLong_AsLongLongAndOverflow(obj.ptr(), &overflow);
  if (overflow != 0) throw py::value_error(std::string(op) + ": " + what + " is out of range");
  return v;
}

int iters_arg(py::handle obj, const char* op) {
  const int64_t n = int_arg(obj, op, "n_iters");
  if (n < 0 || n > (int64_t{1} << 30)) {
    throw py::value_error(std::string(op) + ": n_iters must be in [0, 2^30], got " +
                          std::to_string(n));
  }
  return static_cast<int>(n);
}

StreamArg parse_stream(py::handle obj, const char* op) {
  StreamArg arg;
  if (obj.is_none()) return arg;
  int64_t value = 0;
  if (PyLong_Check(obj.ptr()) && !PyBool_Check(obj.ptr())) {
    value = stream_value_of(obj, op, "an int handle");
    // An int handle is the raw cudaStream_t; 0 is the default (legacy) stream.
    arg.handle = value == 0 ? cudaStreamLegacy : reinterpret_cast<cudaStream_t>(value);
    return arg;
  }
  if (py::hasattr(obj, "__cuda_stream__")) {
    // The CUDA stream protocol: a method (or, in early versions, an attribute) giving
    // (version, handle).
    py::object info = obj.attr("__cuda_stream__");
    if (PyCallable_Check(info.ptr())) info = info();
    if (!py::isinstance<py::tuple>(info) || py::len(info) != 2) {
      throw py::type_error(std::string(op) +
                           ": stream: __cuda_stream__ must give a (version, handle) tuple");
    }
    value = stream_value_of(py::tuple(info)[1], op, "__cuda_stream__()[1]");
  } else if (py::hasattr(obj, "cuda_stream")) {
    value = stream_value_of(obj.attr("cuda_stream"), op, ".cuda_stream");
  } else if (py::hasattr(obj, "ptr")) {
    value = stream_value_of(obj.attr("ptr"), op, ".ptr");
  } else {
    throw py::type_error(std::string(op) +
                         ": stream: expected None, an int handle or an object with "
                         "__cuda_stream__, .cuda_stream or .ptr, got " +
                         type_name(obj));
  }
  arg.handle = value == 0 ? cudaStreamLegacy : reinterpret_cast<cudaStream_t>(value);
  return arg;
}

int64_t stream_protocol_value(cudaStream_t stream) {
  if (stream == nullptr || stream == cudaStreamLegacy) return 1;
  if (stream == cudaStreamPerThread) return 2;
  return static_cast<int64_t>(reinterpret_cast<intptr_t>(stream));
}

cudaStream_t stream_from_protocol_value(int64_t value) {
  if (value == 0 || value == 1) return cudaStreamLegacy;
  if (value == 2) return cudaStreamPerThread;
  return reinterpret_cast<cudaStream_t>(static_cast<intptr_t>(value));
}

bool same_stream(cudaStream_t a, cudaStream_t b) {
  return stream_protocol_value(a) == stream_protocol_value(b);
}

bool capturing(cudaStream_t stream, const std::string& op) {
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  check_cuda(cudaStreamIsCapturing(stream, &capture),
             op + ": cannot query the stream's capture status");
  return capture != cudaStreamCaptureStatusNone;
}

void order_after(cudaStream_t producer, cudaStream_t consumer, const char* op) {
  if (same_stream(producer, consumer)) return;
  // One event per device and thread, reused: a wait captures the event's state when it is
  // called, so re-recording it later does not disturb earlier waits.
  // Destroyed with the thread (errors ignored: at process exit the runtime may be gone).
  struct Events {
    std::vector<cudaEvent_t> by_device;
    ~Events() {
      for (cudaEvent_t event : by_device) {
        if (event != nullptr) (void)cudaEventDestroy(event);
      }
      (void)cudaGetLastError();
    }
  };
  thread_local Events events;
  int device = 0;
  check_cuda(cudaGetDevice(&device), op, ": cudaGetDevice");
  if (events.by_device.size() <= static_cast<size_t>(device)) {
    events.by_device.resize(static_cast<size_t>(device) + 1, nullptr);
  }
  cudaEvent_t& event = events.by_device[static_cast<size_t>(device)];
  if (event == nullptr) {
    check_cuda(cudaEventCreateWithFlags(&event, cudaEventDisableTiming),
               std::string(op) + ": cudaEventCreate");
  }
  check_cuda(cudaEventRecord(event, producer), op, ": recording an event on the array's stream");
  check_cuda(cudaStreamWaitEvent(consumer, event, 0), op,
             ": making the op's stream wait for the array's stream");
}

std::string type_name(py::handle obj) {
  py::handle type = reinterpret_cast<PyObject*>(Py_TYPE(obj.ptr()));
  std::string module = py::str(type.attr("__module__"));
  std::string name = py::str(type.attr("__qualname__"));
  if (module == "builtins") return name;
  return module + "." + name;
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::ostringstream text;
  text << "(";
  for (size_t i = 0; i < shape.size(); ++i)
    text << (i ? ", " : "") << shape[i];
  if (shape.size() == 1) text << ",";
  text << ")";
  return text.str();
}

std::vector<int64_t> contiguous_strides(const std::vector<int64_t>& shape) {
  std::vector<int64_t> strides(shape.size());
  int64_t stride = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    strides[i] = stride;
    stride *= shape[i] > 0 ? shape[i] : 1;
  }
  return strides;
}

bool bool_arg(py::handle obj, const char* op, const char* what) {
  if (PyBool_Check(obj.ptr())) return obj.ptr() == Py_True;
  const std::string type = type_name(obj);
  if (type == "numpy.bool_" || type == "numpy.bool") return PyObject_IsTrue(obj.ptr()) == 1;
  throw py::type_error(std::string(op) + ": " + what + " must be a bool, got " + type);
}

std::string str_arg(py::handle obj, const char* op, const char* what) {
  if (!PyUnicode_Check(obj.ptr())) {
    throw py::type_error(std::string(op) + ": " + what + " must be a str, got " + type_name(obj));
  }
  Py_ssize_t size = 0;
  const char* text = PyUnicode_AsUTF8AndSize(obj.ptr(), &size);
  if (text == nullptr) {
    PyErr_Clear();
    throw py::value_error(std::string(op) + ": " + what + " is not valid text");
  }
  return std::string(text, static_cast<size_t>(size));
}

std::string path_arg(py::handle obj, const char* op, const char* what) {
  py::object path;
  try {
    path = py::module_::import("os").attr("fspath")(obj);
  } catch (py::error_already_set&) {
    throw py::type_error(std::string(op) + ": " + what +
                         " must be str, bytes or os.PathLike, not " + type_name(obj));
  }
  std::string bytes;
  if (py::isinstance<py::bytes>(path)) {
    bytes = py::cast<std::string>(path);
  } else {
    // os.fsencode: the file system's encoding, with surrogateescape for undecodable bytes.
    bytes = py::cast<std::string>(py::module_::import("os").attr("fsencode")(path));
  }
  if (bytes.find('\0') != std::string::npos) {
    throw py::value_error(std::string(op) + ": " + what + " must not contain a NUL character");
  }
  if (bytes.empty()) throw py::value_error(std::string(op) + ": " + what + " must not be empty");
  return bytes;
}

}  // namespace cudaops::python
