// The IVF index's files: ivf_save copies the held part of an index to the host and writes it,
// ivf_load reads a checked file (ivf_file.h) into an index's buffer.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>
#include <new>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/launch.h"
#include "cudaops/ivf.h"
#include "ivf/ivf_file.h"
#include "ivf/ivf_plan.h"

namespace cudaops {
namespace detail::ivf {
namespace {

/// `rows` rows of `width` bytes, `src_pitch` bytes apart, to rows `dst_pitch` bytes apart.
cudaError_t copy_rows(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t width,
                      int64_t rows, cudaMemcpyKind kind, cudaStream_t stream) {
  if (width == 0 || rows == 0) return cudaSuccess;
  return cudaMemcpy2DAsync(dst, dst_pitch, src, src_pitch, width, static_cast<size_t>(rows), kind,
                           stream);
}

/// f(), with a host allocation that fails (std::bad_alloc, or a length past the vector's limit)
/// turned into kOutOfMemory: a Status function never throws.
template <typename F>
Status without_throwing(const char* op, F&& f) noexcept {
  try {
    return f();
  } catch (const std::bad_alloc&) {
    return Status(StatusCode::kOutOfMemory, std::string(op) + ": host memory is exhausted");
  } catch (const std::length_error&) {
    return Status(StatusCode::kOutOfMemory, std::string(op) + ": a host array would be too long");
  } catch (...) {
    return Status(StatusCode::kInvalidArgument, std::string(op) + ": an unexpected exception");
  }
}

Status save(const IvfIndex& index, const char* path, cudaStream_t stream) {
  constexpr const char* kOp = "ivf_save";
  IvfLayout l;
  if (Status s = detail::ivf::check_built(kOp, index, &l); !s.ok()) return s;
  if (path == nullptr || *path == 0) return detail::ivf::invalid(kOp, "path must not be empty");
  const IvfShape& s = index.shape;
  IvfShape held = s;
  held.capacity = index.tokens;
  held.max_clusters = index.n_clusters;
  detail::ivf::HostIndex x;
  if (Status st = x.allocate(held, kOp); !st.ok()) return st;
  const auto* base = static_cast<const unsigned char*>(index.data);
  const int64_t h = s.heads, c = index.n_clusters, n = index.tokens;
  const size_t cm = static_cast<size_t>(s.max_clusters), cap = static_cast<size_t>(s.capacity);
  const size_t d = static_cast<size_t>(s.dim), dv = static_cast<size_t>(s.value_dim);
  const size_t cc = static_cast<size_t>(c), nn = static_cast<size_t>(n);
  const cudaMemcpyKind down = cudaMemcpyDeviceToHost;
  cudaError_t e =
      detail::ivf::copy_rows(x.means.data(), d * 4, base + l.means, d * 4, d * 4, h, down, stream);
  const struct {
    void* dst;
    size_t offset, pitch, width;
  } pieces[] = {
      {x.centroids.data(), l.centroids, cm * d * 4, cc * d * 4},
      {x.centroids_lp.data(), l.centroids_lp, cm * d * 2, cc * d * 2},
      {x.offsets.data(), l.offsets, (cm + 1) * 8, (cc + 1) * 8},
      {x.sizes.data(), l.sizes, cm * 4, cc * 4},
      {x.ids.data(), l.ids, cap * 4, nn * 4},
      {x.keys.data(), l.keys, cap * d * 2, nn * d * 2},
      {x.values.data(), l.values, cap * dv * 2, nn * dv * 2},
      {x.value_sums.data(), l.value_sums, cm * dv * 4, cc * dv * 4},
  };
  for (const auto& p : pieces) {
    if (e == cudaSuccess)
      e = detail::ivf::copy_rows(p.dst, p.width, base + p.offset, p.pitch, p.width, h, down,
                                 stream);
  }
  if (e == cudaSuccess) e = cudaMemcpyAsync(&x.largest, base + l.largest, 4, down, stream);
  if (e == cudaSuccess) e = cudaStreamSynchronize(stream);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    return detail::cuda_status(e, kOp, "copying the index to the host");
  }
  return detail::ivf::write_index_file(x, path, kOp);
}

Status saved_shape(const char* path, IvfShape* shape) {
  constexpr const char* kOp = "ivf_saved_shape";
  if (path == nullptr || *path == 0) return detail::ivf::invalid(kOp, "path must not be empty");
  if (shape == nullptr) return detail::ivf::invalid(kOp, "shape must not be null");
  return detail::ivf::read_index_shape(path, kOp, shape);
}

Status load(const char* path, IvfIndex* index, cudaStream_t stream) {
  constexpr const char* kOp = "ivf_load";
  if (path == nullptr || *path == 0) return detail::ivf::invalid(kOp, "path must not be empty");
  if (index == nullptr) return detail::ivf::invalid(kOp, "index must not be null");
  IvfLayout l;
  if (Status st = detail::ivf::layout_of(kOp, index->shape, &l); !st.ok()) return st;
  if (Status st = detail::ivf::check_index_data(kOp, *index, "index->data"); !st.ok()) return st;
  detail::ivf::HostIndex x;
  if (Status st = detail::ivf::read_index_file(path, kOp, &x); !st.ok()) return st;
  const IvfShape& f = x.shape;
  const IvfShape& s = index->shape;
  if (f.heads != s.heads || f.dim != s.dim || f.value_dim != s.value_dim || f.dtype != s.dtype ||
      f.capacity > s.capacity || f.max_clusters > s.max_clusters) {
    std::ostringstream text;
    text << kOp << ": the file holds " << f.heads << " heads of " << f.capacity << " tokens in "
         << f.max_clusters << " clusters, dim " << f.dim << ", value_dim " << f.value_dim << ", "
         << dtype_name(f.dtype)
         << "; index->shape must have the same heads, dims and dtype and room for them";
    return Status(StatusCode::kInvalidArgument, text.str());
  }
  const int64_t h = s.heads, c = f.max_clusters, n = f.capacity;
  const size_t cm = static_cast<size_t>(s.max_clusters), cap = static_cast<size_t>(s.capacity);
  const size_t d = static_cast<size_t>(s.dim), dv = static_cast<size_t>(s.value_dim);
  const size_t cc = static_cast<size_t>(c), nn = static_cast<size_t>(n);
  // The per-cluster arrays at the buffer's stride, the slots past the file's clusters empty.
  std::vector<float> centroids(static_cast<size_t>(h) * cm * d, 0.0f);
  std::vector<uint16_t> centroids_lp(static_cast<size_t>(h) * cm * d, 0);
  std::vector<int64_t> offsets(static_cast<size_t>(h) * (cm + 1), n);
  std::vector<int32_t> sizes(static_cast<size_t>(h) * cm, 0);
  std::vector<float> value_sums(static_cast<size_t>(h) * cm * dv, 0.0f);
  for (size_t hh = 0; hh < static_cast<size_t>(h); ++hh) {
    std::copy_n(x.centroids.begin() + hh * cc * d, cc * d, centroids.begin() + hh * cm * d);
    std::copy_n(x.centroids_lp.begin() + hh * cc * d, cc * d, centroids_lp.begin() + hh * cm * d);
    std::copy_n(x.offsets.begin() + hh * (cc + 1), cc + 1, offsets.begin() + hh * (cm + 1));
    std::copy_n(x.sizes.begin() + hh * cc, cc, sizes.begin() + hh * cm);
    std::copy_n(x.value_sums.begin() + hh * cc * dv, cc * dv, value_sums.begin() + hh * cm * dv);
  }
  auto* base = static_cast<unsigned char*>(index->data);
  const cudaMemcpyKind up = cudaMemcpyHostToDevice;
  const struct {
    size_t offset;
    const void* src;
    size_t bytes;
  } whole[] = {{l.means, x.means.data(), x.means.size() * 4},
               {l.centroids, centroids.data(), centroids.size() * 4},
               {l.centroids_lp, centroids_lp.data(), centroids_lp.size() * 2},
               {l.offsets, offsets.data(), offsets.size() * 8},
               {l.sizes, sizes.data(), sizes.size() * 4},
               {l.value_sums, value_sums.data(), value_sums.size() * 4},
               {l.largest, &x.largest, 4}};
  cudaError_t e = cudaSuccess;
  for (const auto& w : whole) {
    if (e == cudaSuccess && w.bytes > 0)
      e = cudaMemcpyAsync(base + w.offset, w.src, w.bytes, up, stream);
  }
  const struct {
    size_t offset;
    const void* src;
    size_t pitch, width;
  } rows[] = {{l.ids, x.ids.data(), cap * 4, nn * 4},
              {l.keys, x.keys.data(), cap * d * 2, nn * d * 2},
              {l.values, x.values.data(), cap * dv * 2, nn * dv * 2}};
  for (const auto& r : rows) {
    if (e == cudaSuccess) {
      e = detail::ivf::copy_rows(base + r.offset, r.pitch, r.src, r.width, r.width, h, up, stream);
    }
  }
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    return detail::cuda_status(e, kOp, "copying the index to the device");
  }
  // The clusters' mean keys are not in the file: computed again from the keys just copied.
  Status means = s.dtype == DType::kFloat16
                     ? detail::ivf::launch_key_means<__half>(kOp, s, l, base, 0, c, stream)
                     : detail::ivf::launch_key_means<__nv_bfloat16>(kOp, s, l, base, 0, c, stream);
  e = cudaStreamSynchronize(stream);  // the host copies go out of scope
  if (!means.ok()) return means;
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    return detail::cuda_status(e, kOp, "copying the index to the device");
  }
  index->tokens = n;
  index->n_clusters = c;
  return Status();
}

}  // namespace
}  // namespace detail::ivf

Status ivf_save(const IvfIndex& index, const char* path, cudaStream_t stream) {
  return detail::ivf::without_throwing("ivf_save",
                                       [&] { return detail::ivf::save(index, path, stream); });
}

Status ivf_saved_shape(const char* path, IvfShape* shape) {
  return detail::ivf::without_throwing("ivf_saved_shape",
                                       [&] { return detail::ivf::saved_shape(path, shape); });
}

Status ivf_load(const char* path, IvfIndex* index, cudaStream_t stream) {
  return detail::ivf::without_throwing("ivf_load",
                                       [&] { return detail::ivf::load(path, index, stream); });
}

}  // namespace cudaops
