#pragma once

// IEEE binary16 and bfloat16 on the host, without CUDA headers: round to nearest even, with
// subnormals, infinities and NaN, matching __float2half_rn and __float2bfloat16_rn.
#include <cstdint>

namespace cudaops::ref {

uint16_t float_to_half_bits(float value);
float half_bits_to_float(uint16_t bits);
uint16_t float_to_bfloat16_bits(float value);
float bfloat16_bits_to_float(uint16_t bits);

}  // namespace cudaops::ref
