#include "cudaops/elementwise.h"

#include "core/dispatch.cuh"
#include "core/kernel_families.h"
#include "core/validate.h"
#include "elementwise/elementwise_kernel.cuh"

namespace cudaops {
namespace {

struct AddOp {
  __device__ float operator()(float a, float b) const { return a + b; }
};

struct AddScalarOp {
  float alpha;
  __device__ float operator()(float a) const { return a + alpha; }
};

// num_items elements of dtype: not null, aligned, and their bytes addressable in int64.
Status check_array(const char* op, const char* name, const void* data, int64_t num_items,
                   DType dtype) {
  return detail::check_matrix(op, name, data, num_items, 1, num_items, dtype, "num_items");
}

// d_out may be d_a or d_b exactly (in place); any other overlap is refused.
detail::Region array_region(const char* name, const void* data, int64_t num_items, DType dtype,
                            bool written) {
  return detail::matrix_region(name, data, num_items, 1, num_items, dtype, written);
}

}  // namespace

namespace {
const void* family_kernel() {
  return reinterpret_cast<const void*>(detail::elementwise_vec_kernel<float, 2, AddOp>);
}
CUDAOPS_KERNEL_FAMILY("elementwise", "elementwise_api.cu", family_kernel);
}  // namespace

Status add(const void* d_a, const void* d_b, void* d_out, int64_t num_items, DType dtype,
           cudaStream_t stream) {
  constexpr const char* kOp = "add";
  if (Status s = detail::check_count(kOp, "num_items", num_items); !s.ok()) return s;
  if (Status s = detail::check_float_dtype(kOp, "dtype", dtype); !s.ok()) return s;
  if (Status s = check_array(kOp, "d_a", d_a, num_items, dtype); !s.ok()) return s;
  if (Status s = check_array(kOp, "d_b", d_b, num_items, dtype); !s.ok()) return s;
  if (Status s = check_array(kOp, "d_out", d_out, num_items, dtype); !s.ok()) return s;
  if (num_items == 0) return Status();
  if (Status s =
          detail::check_overlaps(kOp, {array_region("d_a", d_a, num_items, dtype, false),
                                       array_region("d_b", d_b, num_items, dtype, false),
                                       array_region("d_out", d_out, num_items, dtype, true)});
      !s.ok())
    return s;

  return detail::dispatch_float(kOp, dtype, [&](auto tag) {
    using T = decltype(tag);
    const detail::Operands<T, 2> p{{static_cast<const T*>(d_a), static_cast<const T*>(d_b)},
                                   static_cast<T*>(d_out)};
    return detail::launch_elementwise(kOp, p, num_items, AddOp{}, stream);
  });
}

Status add_scalar(const void* d_a, float alpha, void* d_out, int64_t num_items, DType dtype,
                  cudaStream_t stream) {
  constexpr const char* kOp = "add_scalar";
  if (Status s = detail::check_count(kOp, "num_items", num_items); !s.ok()) return s;
  if (Status s = detail::check_float_dtype(kOp, "dtype", dtype); !s.ok()) return s;
  if (Status s = check_array(kOp, "d_a", d_a, num_items, dtype); !s.ok()) return s;
  if (Status s = check_array(kOp, "d_out", d_out, num_items, dtype); !s.ok()) return s;
  if (num_items == 0) return Status();
  if (Status s =
          detail::check_overlaps(kOp, {array_region("d_a", d_a, num_items, dtype, false),
                                       array_region("d_out", d_out, num_items, dtype, true)});
      !s.ok())
    return s;

  return detail::dispatch_float(kOp, dtype, [&](auto tag) {
    using T = decltype(tag);
    const detail::Operands<T, 1> p{{static_cast<const T*>(d_a)}, static_cast<T*>(d_out)};
    return detail::launch_elementwise(kOp, p, num_items, AddScalarOp{alpha}, stream);
  });
}

}  // namespace cudaops
