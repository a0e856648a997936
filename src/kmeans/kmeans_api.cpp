// Batched k-means: the public entry points check every argument, size the workspace and pick the
// kernels' dtype (kmeans_<dtype>.cu).
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <sstream>
#include <string>

#include "core/checked.h"
#include "core/dispatch.cuh"
#include "core/launch.h"
#include "core/validate.h"
#include "core/workspace.h"
#include "cudaops/kmeans.h"
#include "engine/kmeans_plan.h"

namespace cudaops {
namespace detail::kmeans {

Layout make_layout(int64_t batch, int64_t n, int64_t d, int64_t k, DType dtype, bool fit,
                   bool center, bool random_init, bool own_centroids, bool weights) {
  Layout l;
  l.batch = batch;
  l.n = n;
  l.d = d;
  l.k = k;
  const int64_t element = element_size(dtype);
  l.d_pad = padded_dims(d, element);
  WorkspaceCarver b;
  int64_t bn = 0, bk = 0, bkd = 0, bkp = 0, bd = 0;
  if (!checked_mul(batch, n, &bn) || !checked_mul(batch, k, &bk) || !checked_mul(bk, d, &bkd) ||
      !checked_mul(bk, l.d_pad, &bkp) || !checked_mul(batch, d, &bd)) {
    l.bytes = std::numeric_limits<size_t>::max();
    return l;
  }
  if (center) l.means = b.piece({bd, 4});
  if (fit && weights) l.point_w = b.piece({bn, 4});
  if (fit && !own_centroids) l.centroids = b.piece({bkd, 4});
  l.operand = b.piece({bkp, element});
  l.bias = b.piece({bk, 4});
  l.labels = b.piece({bn, 4});
  l.scores = b.piece({bn, 4});
  if (fit) {
    l.counts = b.piece({bk, 4});
    l.starts = b.piece({bk, 4});
    l.perm = b.piece({bn, 4});
    l.prior = b.piece({bn, 4});
    int64_t flags = 0;
    if (!checked_add(bk, batch, &flags)) b.set_overflow();
    l.dirty = b.piece({flags, 4});
  }
  if (fit && random_init) {
    l.rows = b.piece({bk, 4});
    int64_t words = 0;
    if (!checked_mul(batch, (n + 31) / 32, &words)) b.set_overflow();
    l.bitmap = b.piece({words, 4});
  }
  l.bytes = b.overflow() ? std::numeric_limits<size_t>::max() : b.bytes();
  return l;
}

namespace {

Status invalid(const char* op, const std::string& text) {
  return Status(StatusCode::kInvalidArgument, std::string(op) + ": " + text);
}

/// The points' checks, shared by kmeans and kmeans_assign; fills in the defaults of ld and
/// batch_stride.
/// The assignment's centroid count: labels are int32, so at most INT32_MAX clusters.
Status check_assign_clusters(const char* op, int64_t k) {
  if (k < 1 || k > std::numeric_limits<int32_t>::max()) {
    return invalid(op, "centroids.n_clusters must be from 1 to 2^31 - 1 (labels are int32), got " +
                           std::to_string(k));
  }
  return Status();
}

Status check_points(const char* op, KmeansPoints* p, bool query = false) {
  const int64_t element = element_size(p->dtype);
  if (element == 0) {
    std::ostringstream text;
    text << op << ": points.dtype " << dtype_name(p->dtype)
         << " is not supported; expected float32, float16 or bfloat16";
    return Status(StatusCode::kUnsupportedDtype, text.str());
  }
  if (Status s = check_count(op, "points.batch", p->batch); !s.ok()) return s;
  if (Status s = check_count(op, "points.n", p->n); !s.ok()) return s;
  if (p->n > std::numeric_limits<int32_t>::max()) {
    return invalid(op, "points.n " + std::to_string(p->n) + " must be below 2^31");
  }
  if (p->d < 1) return invalid(op, "points.d must be >= 1, got " + std::to_string(p->d));
  // Sizes times the element size are compared by division or checked: a d, ld or batch_stride
  // near 2^63 must be refused, not overflow.
  if (p->d > kMaxRowBytes / element) {
    std::ostringstream text;
    text << op << ": points.d " << p->d << " is above the largest supported, "
         << kMaxRowBytes / element << " for " << dtype_name(p->dtype);
    return Status(StatusCode::kNotSupported, text.str());
  }
  if (p->ld == 0) p->ld = p->d;
  if (p->ld < p->d) {
    return invalid(op, "points.ld (" + std::to_string(p->ld) + ") must be >= points.d (" +
                           std::to_string(p->d) + ")");
  }
  int64_t ld_bytes = 0;
  if (!checked_mul(p->ld, element, &ld_bytes)) {
    return invalid(op, "points.ld * element size overflows int64");
  }
  if (ld_bytes % 16 != 0) {
    std::ostringstream text;
    text << op << ": points.ld * element size (" << p->ld << " x " << element
         << " bytes) must be a multiple of 16 bytes";
    return Status(StatusCode::kMisaligned, text.str());
  }
  if (p->offsets == nullptr) {
    if (p->batch_stride == 0 && !checked_mul(p->n, p->ld, &p->batch_stride)) {
      return invalid(op, "points.n * points.ld overflows int64");
    }
    if (p->batch_stride < 0) {
      return invalid(op,
                     "points.batch_stride must be >= 0, got " + std::to_string(p->batch_stride));
    }
    int64_t stride_bytes = 0;
    if (!checked_mul(p->batch_stride, element, &stride_bytes)) {
      return invalid(op, "points.batch_stride * element size overflows int64");
    }
    if (stride_bytes % 16 != 0) {
      return Status(StatusCode::kMisaligned,
                    std::string(op) +
                        ": points.batch_stride * element size must be a multiple "
                        "of 16 bytes");
    }
    int64_t last = 0, rows = 0;
    if (p->batch > 0 && p->n > 0 &&
        (!checked_mul(p->batch - 1, p->batch_stride, &last) ||
         !checked_mul(p->n - 1, p->ld, &rows) ||
         last > std::numeric_limits<int64_t>::max() / 4 - rows)) {
      return invalid(op, "the points' extent overflows int64");
    }
  }
  int64_t work = 0;
  if (!checked_mul(p->batch, p->n, &work))
    return invalid(op, "points.batch * points.n overflows int64");
  if (query) return Status();  // a size query needs no memory
  if (work > 0 && p->data == nullptr) {
    return invalid(op, "points.data must not be null when there are points");
  }
  if (work > 0 && reinterpret_cast<uintptr_t>(p->data) % 16 != 0) {
    std::ostringstream text;
    text << op << ": points.data (" << p->data << ") must be 16-byte aligned";
    return Status(StatusCode::kMisaligned, text.str());
  }
  if (p->batch > 0 && p->offsets != nullptr &&
      reinterpret_cast<uintptr_t>(p->offsets) % alignof(int64_t) != 0) {
    return Status(StatusCode::kMisaligned,
                  std::string(op) + ": points.offsets must be 8-byte aligned");
  }
  return Status();
}

Status check_metric(const char* op, KmeansMetric metric) {
  if (metric != KmeansMetric::kL2 && metric != KmeansMetric::kCosine) {
    return invalid(op, "metric " + std::to_string(static_cast<int>(metric)) +
                           " is not kL2 (0) or kCosine (1)");
  }
  return Status();
}

Status check_params(const char* op, const KmeansPoints& p, const KmeansParams& params) {
  if (params.n_clusters < 1) {
    return invalid(op, "n_clusters must be >= 1, got " + std::to_string(params.n_clusters));
  }
  if (params.n_clusters > p.n) {
    return invalid(op, "n_clusters (" + std::to_string(params.n_clusters) +
                           ") must be <= points.n (" + std::to_string(p.n) + ")");
  }
  if (params.n_clusters > kMaxFitClusters) {
    return Status(StatusCode::kNotSupported,
                  std::string(op) + ": n_clusters " + std::to_string(params.n_clusters) +
                      " is above the largest supported, " + std::to_string(kMaxFitClusters));
  }
  if (params.n_iters < 0) {
    return invalid(op, "n_iters must be >= 0, got " + std::to_string(params.n_iters));
  }
  if (Status s = check_metric(op, params.metric); !s.ok()) return s;
  if (params.init != KmeansInit::kStrided && params.init != KmeansInit::kRandom &&
      params.init != KmeansInit::kGiven) {
    return invalid(op, "init " + std::to_string(static_cast<int>(params.init)) +
                           " is not kStrided, kRandom or kGiven");
  }
  if (params.empty != KmeansEmpty::kKeep && params.empty != KmeansEmpty::kFarthest) {
    return invalid(op, "empty " + std::to_string(static_cast<int>(params.empty)) +
                           " is not kKeep or kFarthest");
  }
  if (params.center && params.means != nullptr) {
    return invalid(op, "params.center and params.means both ask for centring; give one");
  }
  if (params.precision != KmeansPrecision::kExact && params.precision != KmeansPrecision::kTf32) {
    return invalid(op, "precision " + std::to_string(static_cast<int>(params.precision)) +
                           " is not kExact (0) or kTf32 (1)");
  }
  return Status();
}

Status check_output(const char* op, const char* name, const void* ptr, bool required, int64_t count,
                    DType dtype) {
  if (ptr == nullptr && !required) return Status();
  return check_pointer(op, name, ptr, count, dtype);
}

Status check_workspace(const char* op, const Layout& layout, void* workspace, size_t bytes,
                       const char* query) {
  if (bytes < layout.bytes) {
    std::ostringstream text;
    text << op << ": workspace_bytes " << bytes << " is below the " << layout.bytes << " bytes "
         << query << " gives for these points";
    return Status(StatusCode::kWorkspaceTooSmall, text.str());
  }
  if (layout.bytes > 0 && workspace == nullptr) return invalid(op, "d_workspace must not be null");
  if (layout.bytes > 0 && reinterpret_cast<uintptr_t>(workspace) % 256 != 0) {
    std::ostringstream text;
    text << op << ": d_workspace (" << workspace << ") must be 256-byte aligned";
    return Status(StatusCode::kMisaligned, text.str());
  }
  return Status();
}

Status require_tensor_cores(const char* op) {
  int device = 0, major = 0, minor = 0;
  if (const cudaError_t error = cudaGetDevice(&device); error != cudaSuccess) {
    return cuda_status(error, op, "querying the device");
  }
  if (const cudaError_t error =
          cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
      error != cudaSuccess) {
    return cuda_status(error, op, "querying the device");
  }
  if (const cudaError_t error =
          cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device);
      error != cudaSuccess) {
    return cuda_status(error, op, "querying the device");
  }
  if (major * 10 + minor < 75) {
    return Status(StatusCode::kNotSupported,
                  std::string(op) + ": needs compute capability 7.5 or newer (device " +
                      std::to_string(device) + " is " + std::to_string(major) + "." +
                      std::to_string(minor) + ")");
  }
  return Status();
}

template <typename T>
T* piece(void* workspace, const Piece& p) {
  return p.bytes == 0 ? nullptr : reinterpret_cast<T*>(static_cast<char*>(workspace) + p.offset);
}

Call make_call(const KmeansPoints& points, const Layout& layout, void* workspace, int64_t k,
               KmeansMetric metric) {
  Call call;
  call.points = points;
  call.k = k;
  call.d_pad = layout.d_pad;
  call.metric = metric;
  call.means = piece<float>(workspace, layout.means);
  call.point_w = piece<float>(workspace, layout.point_w);
  call.prev_labels = piece<int32_t>(workspace, layout.prior);
  call.dirty = piece<int32_t>(workspace, layout.dirty);
  call.moved = call.dirty != nullptr ? call.dirty + layout.batch * layout.k : nullptr;
  call.centroids = piece<float>(workspace, layout.centroids);
  call.operand = piece<void>(workspace, layout.operand);
  call.bias = piece<float>(workspace, layout.bias);
  call.labels = piece<int32_t>(workspace, layout.labels);
  call.scores = piece<float>(workspace, layout.scores);
  call.counts = piece<int32_t>(workspace, layout.counts);
  call.starts = piece<int32_t>(workspace, layout.starts);
  call.perm = piece<int32_t>(workspace, layout.perm);
  call.rows = piece<int32_t>(workspace, layout.rows);
  call.bitmap = piece<uint32_t>(workspace, layout.bitmap);
  return call;
}

constexpr const char* kFit = "kmeans";
constexpr const char* kAssign = "kmeans_assign";

Layout fit_layout(const KmeansPoints& p, const KmeansParams& params, DType centroid_dtype) {
  return make_layout(
      p.batch, p.n, p.d, params.n_clusters, p.dtype, true, params.center,
      params.init == KmeansInit::kRandom, centroid_dtype == DType::kFloat32,
      params.empty == KmeansEmpty::kFarthest || params.metric == KmeansMetric::kCosine);
}

}  // namespace
}  // namespace detail::kmeans

using namespace detail::kmeans;  // NOLINT(google-build-using-namespace): this family's host side

Status kmeans_workspace_size(const KmeansPoints& points, const KmeansParams& params,
                             size_t* bytes) {
  if (bytes == nullptr)
    return detail::kmeans::invalid("kmeans_workspace_size", "bytes must not be null");
  KmeansPoints p = points;
  if (Status s = check_points("kmeans_workspace_size", &p, true); !s.ok()) return s;
  if (Status s = check_params("kmeans_workspace_size", p, params); !s.ok()) return s;
  // The larger of the two centroid dtypes' layouts: the query does not know which is asked.
  const Layout own = fit_layout(p, params, DType::kFloat32);
  const Layout other = fit_layout(p, params, p.dtype);
  const size_t need = std::max(own.bytes, other.bytes);
  if (need == std::numeric_limits<size_t>::max()) {
    return detail::kmeans::invalid("kmeans_workspace_size", "the workspace size overflows");
  }
  *bytes = need;
  return Status();
}

namespace {

// The bytes the points cover when their extent is known on the host (a strided batch); with
// offsets (on the device) it is not, and the region is empty.
detail::Region points_region(const KmeansPoints& p) {
  if (p.offsets != nullptr || p.batch == 0 || p.n == 0) return detail::Region{"points.data"};
  const int64_t elements = (p.batch - 1) * p.batch_stride + (p.n - 1) * p.ld + p.d;  // checked
  return detail::byte_region("points.data", p.data,
                             static_cast<size_t>(elements) * dtype_size(p.dtype), false);
}

// Bytes of a 4-byte value per point; with offsets the count (offsets[batch]) is on the device,
// and 0 here (not checked).
size_t per_point_bytes(const KmeansPoints& p) {
  return p.offsets != nullptr ? 0 : static_cast<size_t>(p.batch * p.n) * 4;
}

}  // namespace

Status kmeans(const KmeansPoints& points, const KmeansParams& params, const KmeansResult& result,
              void* d_workspace, size_t workspace_bytes, cudaStream_t stream) {
  return kmeans_counted(points, params, result, d_workspace, workspace_bytes, nullptr, nullptr,
                        stream);
}

Status detail::kmeans::kmeans_counted(const KmeansPoints& points, const KmeansParams& params,
                                      const KmeansResult& result, void* d_workspace,
                                      size_t workspace_bytes, int32_t* done, int* small_blocks,
                                      cudaStream_t stream) {
  if (small_blocks != nullptr) *small_blocks = 0;
  KmeansPoints p = points;
  if (Status s = check_points(kFit, &p); !s.ok()) return s;
  if (Status s = check_params(kFit, p, params); !s.ok()) return s;
  const int64_t k = params.n_clusters;
  if (result.centroid_dtype != DType::kFloat32 && result.centroid_dtype != p.dtype) {
    std::ostringstream text;
    text << kFit << ": result.centroid_dtype " << dtype_name(result.centroid_dtype)
         << " is not supported; expected float32 or the points' dtype (" << dtype_name(p.dtype)
         << ")";
    return Status(StatusCode::kUnsupportedDtype, text.str());
  }
  const int64_t bk = p.batch * k;  // checked by the layout below
  const Layout layout = fit_layout(p, params, result.centroid_dtype);
  if (layout.bytes == std::numeric_limits<size_t>::max()) {
    return detail::kmeans::invalid(kFit, "the problem's sizes overflow");
  }
  if (Status s = check_output(kFit, "result.centroids", result.centroids, true, bk * p.d,
                              result.centroid_dtype);
      !s.ok())
    return s;
  if (Status s =
          check_output(kFit, "result.labels", result.labels, false, p.batch * p.n, DType::kInt32);
      !s.ok())
    return s;
  if (Status s = check_output(kFit, "result.sizes", result.sizes, false, bk, DType::kInt32);
      !s.ok())
    return s;
  if (Status s =
          check_output(kFit, "result.objective", result.objective, false, p.batch, DType::kFloat32);
      !s.ok())
    return s;
  if (Status s =
          check_output(kFit, "result.means", result.means, false, p.batch * p.d, DType::kFloat32);
      !s.ok())
    return s;
  if (Status s =
          check_output(kFit, "params.means", params.means, false, p.batch * p.d, DType::kFloat32);
      !s.ok())
    return s;
  if (params.means != nullptr && result.means != nullptr) {
    return detail::kmeans::invalid(kFit,
                                   "result.means must be null with params.means (they are given)");
  }
  if (Status s =
          check_workspace(kFit, layout, d_workspace, workspace_bytes, "kmeans_workspace_size");
      !s.ok())
    return s;
  // Launch limits: a block per problem, and per 256 points of one.
  if (p.batch > std::numeric_limits<int32_t>::max() ||
      p.batch * ((p.n + 255) / 256 + 1) > std::numeric_limits<int32_t>::max()) {
    return detail::kmeans::invalid(kFit, "points.batch * points.n is too large for one launch");
  }
  const size_t centroid_bytes = static_cast<size_t>(bk * p.d) * dtype_size(result.centroid_dtype);
  if (Status s = detail::check_overlaps(
          kFit,
          {points_region(p),
           detail::byte_region("result.centroids", result.centroids, centroid_bytes, true),
           detail::byte_region("result.labels", result.labels, per_point_bytes(p), true),
           detail::byte_region("result.sizes", result.sizes, static_cast<size_t>(bk) * 4, true),
           detail::byte_region("result.objective", result.objective,
                               static_cast<size_t>(p.batch) * 4, true),
           detail::byte_region("result.means", result.means, static_cast<size_t>(p.batch * p.d) * 4,
                               true),
           detail::byte_region("params.means", params.means, static_cast<size_t>(p.batch * p.d) * 4,
                               false),
           detail::byte_region("d_workspace", d_workspace, layout.bytes, true)});
      !s.ok())
    return s;
  if (p.batch == 0) return Status();
  if (Status s = require_tensor_cores(kFit); !s.ok()) return s;
  Call call = make_call(p, layout, d_workspace, k, params.metric);
  call.tf32 = params.precision == KmeansPrecision::kTf32;
  call.center = params.center || params.means != nullptr;
  call.compute_means = params.center;
  if (params.center && result.means != nullptr) call.means = result.means;
  // Given means are only read: compute_means is false.
  if (params.means != nullptr) call.means = const_cast<float*>(params.means);
  if (result.centroid_dtype == DType::kFloat32)
    call.centroids = static_cast<float*>(result.centroids);
  call.done = done;
  call.small_blocks = small_blocks;
  return detail::dispatch_float(
      kFit, p.dtype, [&](auto tag) { return fit<decltype(tag)>(call, params, result, stream); });
}

Status kmeans_assign_workspace_size(const KmeansPoints& points, const KmeansCentroids& centroids,
                                    KmeansMetric metric, size_t* bytes) {
  constexpr const char* kQuery = "kmeans_assign_workspace_size";
  if (bytes == nullptr) return detail::kmeans::invalid(kQuery, "bytes must not be null");
  KmeansPoints p = points;
  if (Status s = check_points(kQuery, &p, true); !s.ok()) return s;
  if (Status s = check_metric(kQuery, metric); !s.ok()) return s;
  if (Status s = check_assign_clusters(kQuery, centroids.n_clusters); !s.ok()) return s;
  const Layout layout = make_layout(p.batch, p.n, p.d, centroids.n_clusters, p.dtype, false, false,
                                    false, true, false);
  if (layout.bytes == std::numeric_limits<size_t>::max()) {
    return detail::kmeans::invalid(kQuery, "the workspace size overflows");
  }
  *bytes = layout.bytes;
  return Status();
}

Status kmeans_assign(const KmeansPoints& points, const KmeansCentroids& centroids,
                     KmeansMetric metric, int32_t* d_labels, float* d_distances, void* d_workspace,
                     size_t workspace_bytes, cudaStream_t stream) {
  KmeansPoints p = points;
  if (Status s = check_points(kAssign, &p); !s.ok()) return s;
  if (Status s = check_metric(kAssign, metric); !s.ok()) return s;
  const int64_t k = centroids.n_clusters;
  if (Status s = check_assign_clusters(kAssign, k); !s.ok()) return s;
  if (centroids.dtype != DType::kFloat32 && centroids.dtype != p.dtype) {
    std::ostringstream text;
    text << kAssign << ": centroids.dtype " << dtype_name(centroids.dtype)
         << " is not supported; expected float32 or the points' dtype (" << dtype_name(p.dtype)
         << ")";
    return Status(StatusCode::kUnsupportedDtype, text.str());
  }
  const Layout layout =
      make_layout(p.batch, p.n, p.d, k, p.dtype, false, false, false, true, false);
  if (layout.bytes == std::numeric_limits<size_t>::max()) {
    return detail::kmeans::invalid(kAssign, "the problem's sizes overflow");
  }
  const int64_t work = p.batch * p.n;
  if (Status s = check_output(kAssign, "centroids.data", centroids.data, work > 0,
                              p.batch * k * p.d, centroids.dtype);
      !s.ok())
    return s;
  if (Status s = check_output(kAssign, "centroids.means", centroids.means, false, p.batch * p.d,
                              DType::kFloat32);
      !s.ok())
    return s;
  if (Status s = check_output(kAssign, "d_labels", d_labels, work > 0, work, DType::kInt32);
      !s.ok())
    return s;
  if (Status s = check_output(kAssign, "d_distances", d_distances, false, work, DType::kFloat32);
      !s.ok())
    return s;
  if (Status s = check_workspace(kAssign, layout, d_workspace, workspace_bytes,
                                 "kmeans_assign_workspace_size");
      !s.ok())
    return s;
  if (p.batch > std::numeric_limits<int32_t>::max() ||
      p.batch * ((p.n + 255) / 256 + 1) > std::numeric_limits<int32_t>::max()) {
    return detail::kmeans::invalid(kAssign, "points.batch * points.n is too large for one launch");
  }
  if (Status s = detail::check_overlaps(
          kAssign,
          {points_region(p),
           detail::byte_region("centroids.data", centroids.data,
                               static_cast<size_t>(p.batch * k * p.d) * dtype_size(centroids.dtype),
                               false),
           detail::byte_region("centroids.means", centroids.means,
                               static_cast<size_t>(p.batch * p.d) * 4, false),
           detail::byte_region("d_labels", d_labels, per_point_bytes(p), true),
           detail::byte_region("d_distances", d_distances, per_point_bytes(p), true),
           detail::byte_region("d_workspace", d_workspace, layout.bytes, true)});
      !s.ok())
    return s;
  if (work == 0) return Status();
  if (Status s = require_tensor_cores(kAssign); !s.ok()) return s;
  Call call = make_call(p, layout, d_workspace, k, metric);
  call.center = centroids.means != nullptr;
  call.means = const_cast<float*>(centroids.means);  // read only: compute_means is false
  return detail::dispatch_float(kAssign, p.dtype, [&](auto tag) {
    return assign<decltype(tag)>(call, centroids, d_labels, d_distances, stream);
  });
}

}  // namespace cudaops
