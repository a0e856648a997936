#include "ivf/ivf_file.h"

#include <algorithm>
#include <limits>
#include <new>
#include <string_view>
#include <utility>

#include "core/checked.h"
#include "io/array_file.h"

namespace cudaops::detail::ivf {
namespace {

constexpr std::string_view kKind = "ivf";
constexpr int64_t kShapeFields = 6;  // heads, dim, value_dim, tokens, clusters, dtype

Status file_error(const char* op, const std::string& text) {
  return Status(StatusCode::kFileError, std::string(op) + ": " + text);
}

/// The shape a file may hold (the limits of ivf_index_size, tokens and clusters held).
Status check_saved_shape(const IvfShape& s, const char* op) {
  const bool ok = (s.dtype == DType::kFloat16 || s.dtype == DType::kBFloat16) && s.heads >= 1 &&
                  s.dim >= 8 && s.dim <= 512 && s.dim % 8 == 0 && s.value_dim >= 0 &&
                  s.value_dim <= 512 && s.value_dim % 8 == 0 && s.capacity >= 1 &&
                  s.capacity <= std::numeric_limits<int32_t>::max() && s.max_clusters >= 1 &&
                  s.max_clusters <= 32768;
  int64_t total = 0;
  if (!ok || !checked_product({s.heads, s.capacity, std::max(s.dim, s.value_dim), 2}, &total)) {
    return file_error(op, "the file's index shape is not one an index can have");
  }
  return Status();
}

struct Expected {
  const char* name;
  DType dtype;
  std::vector<int64_t> shape;
};

std::vector<Expected> expected_arrays(const IvfShape& s) {
  const int64_t h = s.heads, c = s.max_clusters, n = s.capacity, d = s.dim, v = s.value_dim;
  return {{"means", DType::kFloat32, {h, d}},
          {"centroids", DType::kFloat32, {h, c, d}},
          {"centroids_lp", s.dtype, {h, c, d}},
          {"offsets", DType::kInt64, {h, c + 1}},
          {"sizes", DType::kInt32, {h, c}},
          {"ids", DType::kInt32, {h, n}},
          {"keys", s.dtype, {h, n, d}},
          {"values", s.dtype, {h, n, v}},
          {"value_sums", DType::kFloat32, {h, c, v}},
          {"largest", DType::kInt32, {1}}};
}

Status shape_from_file(const io::ArrayFile& file, const char* op, IvfShape* s) {
  const io::ArrayInfo* info = file.find("ivf.shape");
  if (info == nullptr || info->dtype != DType::kInt64 || info->shape.size() != 1 ||
      info->shape[0] != kShapeFields) {
    return file_error(op, "the file has no valid ivf.shape array");
  }
  int64_t fields[kShapeFields] = {};
  if (Status st = file.read(*info, fields); !st.ok()) return st;
  s->heads = fields[0];
  s->dim = fields[1];
  s->value_dim = fields[2];
  s->capacity = fields[3];
  s->max_clusters = fields[4];
  s->dtype = fields[5] == static_cast<int64_t>(DType::kFloat16)    ? DType::kFloat16
             : fields[5] == static_cast<int64_t>(DType::kBFloat16) ? DType::kBFloat16
                                                                   : DType::kFloat32;
  return check_saved_shape(*s, op);
}

/// What the search trusts of the clusters: each head's ranges in order within [0, S], sizes equal
/// to them, and the largest size. Needs no token array, so it runs before those are allocated.
Status check_ranges(const HostIndex& x, const char* op) {
  const IvfShape& s = x.shape;
  const int64_t c = s.max_clusters, n = s.capacity;
  int32_t largest = 0;
  for (int64_t h = 0; h < s.heads; ++h) {
    const int64_t* off = &x.offsets[static_cast<size_t>(h * (c + 1))];
    if (off[0] != 0 || off[c] != n) {
      return file_error(
          op, "head " + std::to_string(h) + ": the cluster ranges do not cover " + "its tokens");
    }
    for (int64_t j = 0; j < c; ++j) {
      if (off[j + 1] < off[j] || x.sizes[static_cast<size_t>(h * c + j)] != off[j + 1] - off[j]) {
        return file_error(op, "head " + std::to_string(h) + " cluster " + std::to_string(j) +
                                  ": its range and size disagree");
      }
      largest = std::max<int32_t>(largest, static_cast<int32_t>(off[j + 1] - off[j]));
    }
  }
  if (x.largest != largest) return file_error(op, "the largest cluster's size is not as stored");
  return Status();
}

/// What the search trusts of the tokens: ids in [0, S), each once per head.
Status check_ids(const HostIndex& x, const char* op) {
  const IvfShape& s = x.shape;
  const int64_t n = s.capacity;
  std::vector<uint8_t> seen(static_cast<size_t>(n));
  for (int64_t h = 0; h < s.heads; ++h) {
    std::fill(seen.begin(), seen.end(), 0);
    for (int64_t p = 0; p < n; ++p) {
      const int32_t t = x.ids[static_cast<size_t>(h * n + p)];
      if (t < 0 || t >= n || seen[static_cast<size_t>(t)] != 0) {
        return file_error(op, "head " + std::to_string(h) + ": token ids are not each of its " +
                                  std::to_string(n) + " tokens once");
      }
      seen[static_cast<size_t>(t)] = 1;
    }
  }
  return Status();
}

size_t count_of(std::initializer_list<int64_t> f) {
  int64_t total = 0;
  checked_product(f, &total);  // bounded by check_saved_shape
  return static_cast<size_t>(total);
}

Status no_memory(const IvfShape& s, const char* op) {
  return Status(StatusCode::kOutOfMemory, std::string(op) + ": no host memory for the index's " +
                                              "arrays (" + std::to_string(s.heads) + " heads of " +
                                              std::to_string(s.capacity) + " tokens)");
}

template <typename V>
std::pair<void*, size_t> span_of(std::vector<V>& v) {
  return {v.data(), v.size() * sizeof(V)};
}

}  // namespace

Status HostIndex::allocate(const IvfShape& s, const char* op) {
  if (Status st = allocate_clusters(s, op); !st.ok()) return st;
  return allocate_tokens(op);
}

Status HostIndex::allocate_clusters(const IvfShape& s, const char* op) {
  if (Status st = check_saved_shape(s, op); !st.ok()) return st;
  *this = HostIndex();
  shape = s;
  const int64_t h = s.heads, c = s.max_clusters, d = s.dim, v = s.value_dim;
  try {
    means.assign(count_of({h, d}), 0.0f);
    centroids.assign(count_of({h, c, d}), 0.0f);
    centroids_lp.assign(count_of({h, c, d}), 0);
    offsets.assign(count_of({h, c + 1}), 0);
    sizes.assign(count_of({h, c}), 0);
    value_sums.assign(count_of({h, c, v}), 0.0f);
  } catch (const std::bad_alloc&) {
    *this = HostIndex();
    return no_memory(s, op);
  }
  return Status();
}

Status HostIndex::allocate_tokens(const char* op) {
  const int64_t h = shape.heads, n = shape.capacity, d = shape.dim, v = shape.value_dim;
  try {
    ids.assign(count_of({h, n}), 0);
    keys.assign(count_of({h, n, d}), 0);
    values.assign(count_of({h, n, v}), 0);
  } catch (const std::bad_alloc&) {
    const IvfShape s = shape;
    *this = HostIndex();
    return no_memory(s, op);
  }
  return Status();
}

Status write_index_file(const HostIndex& x, const std::string& path, const char* op) {
  const IvfShape& s = x.shape;
  const int64_t fields[kShapeFields] = {s.heads,    s.dim,          s.value_dim,
                                        s.capacity, s.max_clusters, static_cast<int64_t>(s.dtype)};
  std::vector<io::ArrayToWrite> arrays;
  arrays.push_back({"ivf.shape", DType::kInt64, {kShapeFields}, fields});
  const void* data[] = {x.means.data(),   x.centroids.data(), x.centroids_lp.data(),
                        x.offsets.data(), x.sizes.data(),     x.ids.data(),
                        x.keys.data(),    x.values.data(),    x.value_sums.data(),
                        &x.largest};
  size_t i = 0;
  for (const Expected& e : expected_arrays(s))
    arrays.push_back({e.name, e.dtype, e.shape, data[i++]});
  return io::write_array_file(path, kKind, arrays, op);
}

Status read_index_shape(const std::string& path, const char* op, IvfShape* shape) {
  io::ArrayFile file;
  if (Status st = io::ArrayFile::open(path, kKind, op, &file); !st.ok()) return st;
  return shape_from_file(file, op, shape);
}

Status read_index_file(const std::string& path, const char* op, HostIndex* out) {
  io::ArrayFile file;
  if (Status st = io::ArrayFile::open(path, kKind, op, &file); !st.ok()) return st;
  IvfShape s;
  if (Status st = shape_from_file(file, op, &s); !st.ok()) return st;
  // Every array as the shape says before anything is allocated: the table's entries are bounded
  // by the file's size, so a forged shape cannot ask for more memory than the file holds.
  const std::vector<Expected> expected = expected_arrays(s);
  std::vector<const io::ArrayInfo*> infos;
  for (const Expected& e : expected) {
    const io::ArrayInfo* info = file.find(e.name);
    if (info == nullptr || info->dtype != e.dtype || info->shape != e.shape) {
      return file_error(op, std::string("array ") + e.name +
                                " is missing or not of the dtype and shape the index's shape says");
    }
    infos.push_back(info);
  }
  // Every byte checked in bounded chunks before the arrays' memory is taken; then the clusters'
  // arrays read and their ranges checked before the tokens' (the bulk) are allocated.
  if (Status st = file.verify(); !st.ok()) return st;
  HostIndex x;
  if (Status st = x.allocate_clusters(s, op); !st.ok()) return st;
  const auto read = [&](size_t i, std::pair<void*, size_t> dst) {
    if (infos[i]->bytes != dst.second) return file_error(op, "an array's size is not as shaped");
    if (infos[i]->bytes == 0) return Status();
    return file.read(*infos[i], dst.first);
  };
  // The order of expected_arrays.
  const std::pair<size_t, std::pair<void*, size_t>> clusters[] = {
      {0, span_of(x.means)},
      {1, span_of(x.centroids)},
      {2, span_of(x.centroids_lp)},
      {3, span_of(x.offsets)},
      {4, span_of(x.sizes)},
      {8, span_of(x.value_sums)},
      {9, {&x.largest, sizeof(x.largest)}}};
  for (const auto& [i, dst] : clusters) {
    if (Status st = read(i, dst); !st.ok()) return st;
  }
  if (Status st = check_ranges(x, op); !st.ok()) return st;
  if (Status st = x.allocate_tokens(op); !st.ok()) return st;
  const std::pair<size_t, std::pair<void*, size_t>> tokens[] = {
      {5, span_of(x.ids)}, {6, span_of(x.keys)}, {7, span_of(x.values)}};
  for (const auto& [i, dst] : tokens) {
    if (Status st = read(i, dst); !st.ok()) return st;
  }
  if (Status st = check_ids(x, op); !st.ok()) return st;
  *out = std::move(x);
  return Status();
}

}  // namespace cudaops::detail::ivf
