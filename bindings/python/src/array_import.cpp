#include "array_import.h"

#include <pybind11/stl.h>

#include <string>
#include <utility>

#include "import_detail.h"

namespace cudaops::python {

using detail::cupy_current_stream;
using detail::cupy_empty;
using detail::exchange_api_of;
using detail::import_cai;
using detail::import_dlpack;
using detail::import_exchange;
using detail::is_cupy_ndarray;
using detail::is_plain_torch_tensor;
using detail::pointer_text;
using detail::prefix;
using detail::read_cupy_array;
using detail::read_torch_tensor;
using detail::torch_current_stream;

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

CallContext::~CallContext() {
  // Memory of the caller's framework goes back to its stream-ordered allocator, on the op's stream.
  if (done_) return;
  for (Made& made : results_) {
    if (made.array != nullptr) made.array->mark_ready_noexcept(stream_.handle);
  }
  for (Made& made : scratch_) {
    if (made.array != nullptr) made.array->mark_ready_noexcept(stream_.handle);
  }
}

void CallContext::results_like(py::handle like) {
  like_set_ = true;
  like_api_ = nullptr;
  like_cupy_ = false;
  if (like.is_none() || py::isinstance<Array>(like) || !fast_paths()) return;
  like_api_ = exchange_api_of(like);
  like_cupy_ = like_api_ == nullptr && is_cupy_ndarray(like);
}

ArrayView CallContext::import(py::handle obj, const char* name, Access access, Elements elements) {
  ArrayView view;
  view.name = name;
  bool done = false;
  if (fast_paths()) {
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
  if (!like_set_) {
    like_set_ = true;
    like_api_ = view.exchange_api;
    like_cupy_ = view.wait_cupy_stream;
  }
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

void CallContext::check_stream_device(int device) const {
  const cudaStream_t stream = stream_.handle;
  // The default streams belong to whichever device is current.
  if (stream == nullptr || stream == cudaStreamLegacy || stream == cudaStreamPerThread) return;
  // A capturing stream's device cannot be asked (the query fails and invalidates the capture, in
  // every capture mode); a kernel captured on a stream of another device fails at its launch.
  if (capturing(stream, std::string(op_) + ": stream")) return;
  int stream_device = -1;
  check_cuda(cudaStreamGetDevice(stream, &stream_device),
             std::string(op_) + ": stream: cannot query its device");
  if (stream_device != device) {
    throw py::value_error(std::string(op_) + ": stream is a stream of CUDA device " +
                          std::to_string(stream_device) + " but the arrays are on CUDA device " +
                          std::to_string(device));
  }
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
  check_stream_device(device);
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
      if (api_done == like_api_) framework_stream_ = static_cast<cudaStream_t>(current);
    }
    if (view->wait_torch_stream && !torch_done) {
      order_after(torch_current_stream(device), stream_.handle, op_);
      torch_done = true;
    }
    if (view->wait_cupy_stream && !cupy_done) {
      // CuPy's current stream is per device; the guard made the arrays' device current.
      const cudaStream_t current = cupy_current_stream();
      order_after(current, stream_.handle, op_);
      cupy_done = true;
      if (like_cupy_) framework_stream_ = current;
    }
    if (view->source_array != nullptr) view->source_array->order_before(stream_.handle);
  }
  return device;
}

CallContext::Source CallContext::source() {
  if (source_ != Source::kUnknown) return source_;
  source_ = Source::kPool;
  // Only where the arrays' device is current (guard_) and the framework allocates on the op's
  // stream; otherwise the module's pool, whose arrays wait for the op before being freed.
  if (!guard_) return source_;
  const bool exchange = like_api_ != nullptr && like_api_->managed_tensor_allocator != nullptr &&
                        like_api_->managed_tensor_to_py_object_no_sync != nullptr;
  if (!exchange && !like_cupy_) return source_;
  // The framework's current stream, as prepare() asked it for the ordering, or asked here.
  if (!framework_stream_) {
    if (exchange) {
      void* current = nullptr;
      if (like_api_->current_work_stream(dl::kCUDA, device_, &current) != 0) {
        throw py::error_already_set();
      }
      framework_stream_ = static_cast<cudaStream_t>(current);
    } else {
      framework_stream_ = cupy_current_stream();
    }
  }
  if (same_stream(*framework_stream_, stream_.handle)) {
    source_ = exchange ? Source::kExchange : Source::kCupy;
  }
  return source_;
}

namespace {

struct AllocatorError {
  std::string text;
};

void set_allocator_error(void* context, const char* kind, const char* message) {
  auto* error = static_cast<AllocatorError*>(context);
  error->text =
      std::string(kind != nullptr ? kind : "") + ": " + (message != nullptr ? message : "");
}

}  // namespace

CallContext::Made CallContext::make(const std::vector<int64_t>& shape, DType dtype) {
  Made made;
  const Source from = source();
  if (from == Source::kExchange) {
    dl::Tensor prototype{};
    prototype.device = {dl::kCUDA, device_};
    prototype.ndim = static_cast<int32_t>(shape.size());
    prototype.dtype = dl_dtype(dtype);
    prototype.shape = const_cast<int64_t*>(shape.data());
    dl::ManagedTensorVersioned* tensor = nullptr;
    AllocatorError error;
    if (like_api_->managed_tensor_allocator(&prototype, &tensor, &error, &set_allocator_error) !=
            0 ||
        tensor == nullptr) {
      throw CudaError(std::string(op_) + ": allocating a result of " + shape_text(shape) + " " +
                      dtype_name(dtype) + " through the caller's framework: " + error.text);
    }
    made.tensor.reset(tensor);
    const dl::Tensor& t = tensor->dl_tensor;
    // What the allocator gave is checked before it is written: a dense array of the prototype.
    bool dense = t.ndim == prototype.ndim && t.device.device_type == dl::kCUDA &&
                 t.device.device_id == device_ && t.dtype.code == prototype.dtype.code &&
                 t.dtype.bits == prototype.dtype.bits && t.dtype.lanes == prototype.dtype.lanes;
    int64_t stride = 1;  // C-contiguous, from the last axis
    for (int32_t i = t.ndim; dense && i-- > 0;) {
      dense = t.shape[i] == shape[i] &&
              (t.strides == nullptr || shape[i] == 1 || t.strides[i] == stride);
      stride *= shape[i] > 0 ? shape[i] : 1;
    }
    if (!dense) {
      throw CudaError(std::string(op_) +
                      ": the caller's framework allocated a result other than the dense " +
                      shape_text(shape) + " array asked for");
    }
    made.data = static_cast<char*>(t.data) + t.byte_offset;
    return made;
  }
  if (from == Source::kCupy) {
    made.object = cupy_empty(shape, dtype, &made.data);
    if (made.object) return made;
  }
  made.array =
      std::make_unique<Array>(shape, dtype, device_ < 0 ? 0 : device_, stream_.handle, op_);
  made.data = made.array->data();
  return made;
}

void* CallContext::output_data(const ArrayView* out, const std::vector<int64_t>& shape,
                               DType dtype) {
  if (out != nullptr) return out->data;
  results_.push_back(make(shape, dtype));
  return results_.back().data;
}

void* CallContext::scratch(size_t bytes) {
  if (bytes == 0) return nullptr;
  const auto words = static_cast<int64_t>((bytes + 3) / 4);
  scratch_.push_back(make({words}, DType::kInt32));
  return scratch_.back().data;
}

void CallContext::mark_done() {
  if (done_) return;
  done_ = true;
  for (Made& made : results_) {
    if (made.array != nullptr) made.array->mark_ready(stream_.handle, op_);
  }
  // Scratch memory of the pool is freed after this event, that is after the op's work.
  for (Made& made : scratch_) {
    if (made.array != nullptr) made.array->mark_ready(stream_.handle, op_);
  }
}

py::object CallContext::finish(py::handle out, py::handle like) {
  mark_done();
  if (!out.is_none()) return py::reinterpret_borrow<py::object>(out);
  return take_result(0, like);
}

py::object CallContext::take_result(size_t index, py::handle like) {
  mark_done();
  Made& made = results_.at(index);
  py::object result;
  if (made.tensor != nullptr) {
    void* object = nullptr;
    // The framework takes the tensor, even where it fails.
    if (like_api_->managed_tensor_to_py_object_no_sync(made.tensor.release(), &object) != 0 ||
        object == nullptr) {
      if (PyErr_Occurred() != nullptr) throw py::error_already_set();
      throw CudaError(std::string(op_) + ": the caller's framework did not take its result");
    }
    result = py::reinterpret_steal<py::object>(static_cast<PyObject*>(object));
  } else if (made.object) {
    result = std::move(made.object);
  } else {
    return as_kind_of(py::cast(std::move(made.array)), like);
  }
  // Made by the framework of the first array; another `like` gets it through DLPack.
  if (Py_TYPE(like.ptr()) == Py_TYPE(result.ptr())) return result;
  return as_kind_of(result, like);
}

py::object as_kind_of(py::object array, py::handle like) {
  if (like.is_none() || py::isinstance<Array>(like)) return array;
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

}  // namespace cudaops::python
