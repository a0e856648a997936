// The DLPack ABI (https://dmlc.github.io/dlpack/latest/c_api.html), versions 0.x (legacy
// "dltensor" capsules) and 1.x ("dltensor_versioned"). Only the layout is needed, so it is
// written out here rather than taken as a dependency.
#pragma once

#include <cstdint>

namespace cudaops::python::dl {

enum DeviceType : int32_t {
  kCPU = 1,
  kCUDA = 2,
  kCUDAHost = 3,
  kOpenCL = 4,
  kVulkan = 7,
  kMetal = 8,
  kVPI = 9,
  kROCM = 10,
  kROCMHost = 11,
  kExtDev = 12,
  kCUDAManaged = 13,
  kOneAPI = 14,
  kWebGPU = 15,
  kHexagon = 16,
  kMAIA = 17,
};

enum TypeCode : uint8_t {
  kInt = 0,
  kUInt = 1,
  kFloat = 2,
  kOpaqueHandle = 3,
  kBfloat = 4,
  kComplex = 5,
  kBool = 6,
};

struct Device {
  int32_t device_type;
  int32_t device_id;
};

struct DataType {
  uint8_t code;
  uint8_t bits;
  uint16_t lanes;
};

struct Tensor {
  void* data;
  Device device;
  int32_t ndim;
  DataType dtype;
  int64_t* shape;
  int64_t* strides;  // in elements; NULL means C-contiguous
  uint64_t byte_offset;
};

struct ManagedTensor {
  Tensor dl_tensor;
  void* manager_ctx;
  void (*deleter)(ManagedTensor* self);
};

struct PackVersion {
  uint32_t major;
  uint32_t minor;
};

constexpr uint64_t kFlagReadOnly = 1ULL << 0;
constexpr uint64_t kFlagIsCopied = 1ULL << 1;

struct ManagedTensorVersioned {
  PackVersion version;
  void* manager_ctx;
  void (*deleter)(ManagedTensorVersioned* self);
  uint64_t flags;
  Tensor dl_tensor;
};

constexpr uint32_t kMajorVersion = 1;
constexpr uint32_t kMinorVersion = 0;

constexpr const char* kCapsuleLegacy = "dltensor";
constexpr const char* kCapsuleLegacyUsed = "used_dltensor";
constexpr const char* kCapsuleVersioned = "dltensor_versioned";
constexpr const char* kCapsuleVersionedUsed = "used_dltensor_versioned";

/// Releases a DLPack tensor through its deleter (a no-op for null); for owning smart pointers.
struct Release {
  void operator()(ManagedTensor* t) const noexcept {
    if (t != nullptr && t->deleter != nullptr) t->deleter(t);
  }
  void operator()(ManagedTensorVersioned* t) const noexcept {
    if (t != nullptr && t->deleter != nullptr) t->deleter(t);
  }
};

}  // namespace cudaops::python::dl

namespace cudaops::python::dl {

// The C exchange API (DLPack 1.2+): a table of functions on the array's type that converts an
// array without going through Python, published as type.__dlpack_c_exchange_api__ (a capsule
// named "dlpack_exchange_api") or, in its first form, type.__c_dlpack_exchange_api__ (an int).
struct ExchangeAPIHeader {
  PackVersion version;
  ExchangeAPIHeader* prev_api;
};

struct ExchangeAPI {
  ExchangeAPIHeader header;
  // A new tensor of the prototype's dtype, shape and device from the framework's allocator;
  // set_error is called exactly when it fails.
  int (*managed_tensor_allocator)(Tensor* prototype, ManagedTensorVersioned** out, void* error_ctx,
                                  void (*set_error)(void* error_ctx, const char* kind,
                                                    const char* message));
  int (*managed_tensor_from_py_object_no_sync)(void* py_object, ManagedTensorVersioned** out);
  // The framework's array around `tensor`, whose ownership it takes.
  int (*managed_tensor_to_py_object_no_sync)(ManagedTensorVersioned* tensor, void** out_py_object);
  int (*dltensor_from_py_object_no_sync)(void* py_object, Tensor* out);  // may be null
  int (*current_work_stream)(int32_t device_type, int32_t device_id, void** out_stream);
};

constexpr const char* kExchangeAPICapsule = "dlpack_exchange_api";

}  // namespace cudaops::python::dl
