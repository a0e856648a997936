#pragma once

// Double-precision references of the elementwise ops. Inputs are read exactly as stored.
#include <vector>

#include "reference/host_array.h"

namespace cudaops::ref {

std::vector<double> add(const HostArray& a, const HostArray& b);
/// alpha is rounded to float32 first, as the op takes it.
std::vector<double> add_scalar(const HostArray& a, float alpha);

}  // namespace cudaops::ref
