// One converter from any Python array object to a view the ops can use: DLPack (versioned, then
// legacy), __cuda_array_interface__ v2/v3, and direct reads of torch tensors and cudaops.Array.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "array.h"
#include "common.h"
#include "cudaops/dtype.h"
#include "dlpack.h"

namespace cudaops::python {

enum class Access { kRead, kWrite };

/// What element types an import accepts: the library's dtypes, or any element type with a whole
/// number of bytes (the array is then only a pointer, as for the arguments of a JIT kernel).
enum class Elements { kTyped, kAny };

/// A borrowed view of an array: valid while the object it came from is alive. A DLPack tensor
/// taken from a capsule is released (its deleter called) when the view goes away.
struct ArrayView {
  std::string name;               // the argument's name, for messages
  void* data = nullptr;           // first element (byte_offset applied)
  DType dtype = DType::kFloat32;  // meaningful only when `typed`
  bool typed = true;              // false: an element type outside DType (Elements::kAny)
  int64_t item_size = 4;          // bytes per element
  std::string type_text;          // the element type as the producer named it, for messages
  std::vector<int64_t> shape;
  std::vector<int64_t> strides;  // in elements
  int64_t size = 0;
  int device = -1;  // -1: known only from the pointer (CUDA array interface)
  bool readonly = false;
  const char* protocol = "";  // how it was imported, for messages

  // Producer streams the op's stream must wait for.
  bool wait_cai_stream = false;  // __cuda_array_interface__ v3 "stream"
  cudaStream_t cai_stream = nullptr;
  bool wait_torch_stream = false;                 // torch's current stream on `device`
  bool wait_cupy_stream = false;                  // CuPy's current stream on `device`
  const dl::ExchangeAPI* exchange_api = nullptr;  // its current_work_stream on `device`
  const Array* source_array = nullptr;            // a cudaops.Array read directly

  bool c_contiguous() const;

  // The DLPack tensor this view holds, if any.
  std::unique_ptr<dl::ManagedTensor, dl::Release> legacy;
  std::unique_ptr<dl::ManagedTensorVersioned, dl::Release> versioned;
};

/// What one op call needs around its arrays: the stream, the arrays' device (made current for the
/// call and restored afterwards) and the ordering after the arrays' producers.
class CallContext {
 public:
  CallContext(const char* op, py::handle stream);
  /// A call that ends by an exception, possibly after launching part of its work: its new
  /// results and scratch go back to the pool after the op's stream, not before.
  ~CallContext();
  CallContext(const CallContext&) = delete;
  CallContext& operator=(const CallContext&) = delete;

  const char* op() const { return op_; }
  cudaStream_t stream() const { return stream_.handle; }

  /// Imports `obj` as argument `name`. Checks everything that needs no GPU: protocol, dtype,
  /// device type, read-only outputs, mask, strides, alignment.
  ArrayView import(py::handle obj, const char* name, Access access,
                   Elements elements = Elements::kTyped);

  /// The `out=` argument: none when None, else imported for writing and checked to have the
  /// dtype and shape of `like` and to be C-contiguous.
  std::optional<ArrayView> import_out(py::handle out, const ArrayView& like);

  /// Finds the device all `arrays` (null entries skipped) live on, makes it current and orders
  /// the op's stream after the arrays' producers. Returns the device. When nothing has elements,
  /// touches no CUDA state unless it must ask for the current device.
  int prepare(const std::vector<const ArrayView*>& arrays);
  int prepare(std::initializer_list<const ArrayView*> arrays) {
    return prepare(std::vector<const ArrayView*>(arrays));
  }

  // Checks shared by the ops. Each throws with the op's and the arguments' names.
  void require_contiguous(const ArrayView& view) const;
  void require_same_shape(const ArrayView& reference, const ArrayView& view) const;
  void require_same_dtype(const ArrayView& reference, const ArrayView& view) const;
  void require_floating(const ArrayView& view) const;

  /// New results are made as the same kind of array as `like` (None: cudaops.Array). Without
  /// this call, as the first array imported.
  void results_like(py::handle like);

  /// The result: `out` when given (already checked), else a new array of shape x dtype (new
  /// results are numbered in the order they are made, from 0). After prepare().
  void* output_data(const ArrayView* out, const std::vector<int64_t>& shape, DType dtype);

  /// Device memory for this call only (the op's workspace): freed once the call's work is done.
  void* scratch(size_t bytes);

  /// After a successful launch: `out` itself when given; else the new array, as the same kind of
  /// array as `like` (torch, CuPy, JAX, Numba), or the cudaops.Array itself.
  py::object finish(py::handle out, py::handle like);

  /// After a successful launch: new result `index`, as the same kind of array as `like`.
  py::object take_result(size_t index, py::handle like);

 private:
  /// Where the memory of new results and scratch comes from. The caller's framework, where it
  /// allocates on the op's stream: its stream-ordered allocator then frees the memory safely, and
  /// the result needs no conversion.
  enum class Source : uint8_t { kUnknown, kPool, kExchange, kCupy };

  /// One new result or scratch buffer: memory of exactly one source.
  struct Made {
    std::unique_ptr<Array> array;                                     // the module's pool
    std::unique_ptr<dl::ManagedTensorVersioned, dl::Release> tensor;  // the DLPack C exchange API
    py::object object;                                                // a CuPy array
    void* data = nullptr;
  };

  Source source();
  Made make(const std::vector<int64_t>& shape, DType dtype);

  const char* op_;
  StreamArg stream_;
  int device_ = -1;
  std::optional<DeviceGuard> guard_;
  void mark_done();
  /// Refuses a stream of another device than `device`, the arrays' (ValueError).
  void check_stream_device(int device) const;

  // The kind of array new results are made as.
  bool like_set_ = false;
  const dl::ExchangeAPI* like_api_ = nullptr;     // its type's C exchange API, if any
  bool like_cupy_ = false;                        // a cupy.ndarray
  std::optional<cudaStream_t> framework_stream_;  // its current stream on the arrays' device
  Source source_ = Source::kUnknown;

  std::vector<Made> results_;
  std::vector<Made> scratch_;
  bool done_ = false;
};

/// Turns a cudaops.Array into the same kind of array as `like`, zero-copy, without importing
/// anything the caller has not imported.
py::object as_kind_of(py::object array, py::handle like);

/// Whether torch tensors and cudaops.Array are read directly rather than through DLPack
/// (on by default; the protocols are used when off, for tests and measurements).
void set_fast_paths(bool enabled);
bool fast_paths();

/// "float32" / a DType name / an object whose str() is one: the dtype it names.
DType parse_dtype_arg(py::handle obj, const char* op);

}  // namespace cudaops::python
