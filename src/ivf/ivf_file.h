#pragma once

// The IVF index's file: the held part of an index as named arrays (src/io/array_file.h, kind
// "ivf"), host only. Reading checks each array's name, dtype and shape against the index's shape
// and then what the search trusts: CSR offsets within the tokens and in order, sizes equal to the
// ranges, token ids in range, the largest size. The device copies are ivf_save's and ivf_load's.
#include <cstdint>
#include <string>
#include <vector>

#include "cudaops/ivf.h"
#include "cudaops/status.h"

namespace cudaops::detail::ivf {

/// An index's held part in host memory: capacity = tokens, max_clusters = n_clusters.
struct HostIndex {
  IvfShape shape;                      // capacity and max_clusters are the held tokens and clusters
  std::vector<float> means;            // [H, D]
  std::vector<float> centroids;        // [H, C, D]
  std::vector<uint16_t> centroids_lp;  // [H, C, D]
  std::vector<int64_t> offsets;        // [H, C + 1]
  std::vector<int32_t> sizes;          // [H, C]
  std::vector<int32_t> ids;            // [H, S]
  std::vector<uint16_t> keys;          // [H, S, D]
  std::vector<uint16_t> values;        // [H, S, Dv]
  std::vector<float> value_sums;       // [H, C, Dv]
  int32_t largest = 0;

  /// Every vector sized for `shape` (shape checked first); kOutOfMemory, nothing held, where the
  /// host has no room.
  Status allocate(const IvfShape& s, const char* op);
  /// The clusters' vectors alone (all but ids, keys and values), as allocate.
  Status allocate_clusters(const IvfShape& s, const char* op);
  /// The tokens' vectors (ids, keys, values) of the shape allocate_clusters was given.
  Status allocate_tokens(const char* op);
};

Status write_index_file(const HostIndex& index, const std::string& path, const char* op);
Status read_index_file(const std::string& path, const char* op, HostIndex* out);
/// The shape of a saved index (its arrays not read).
Status read_index_shape(const std::string& path, const char* op, IvfShape* shape);

}  // namespace cudaops::detail::ivf
