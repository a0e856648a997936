#pragma once

// Shared-memory addresses as the PTX instructions that take them (cp.async, ldmatrix, mbarriers,
// wgmma descriptors) want them: 32-bit offsets in the shared window.
#include <cstdint>

namespace cudaops::detail {

__device__ __forceinline__ uint32_t shared_address(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

}  // namespace cudaops::detail
