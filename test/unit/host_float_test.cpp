#include "reference/host_float.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "reference/host_array.h"

namespace cudaops::ref {
namespace {

float from_bits(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

TEST(HostHalf, EveryBitPatternRoundTrips) {
  for (uint32_t bits = 0; bits <= 0xffff; ++bits) {
    const float f = half_bits_to_float(static_cast<uint16_t>(bits));
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(half_bits_to_float(float_to_half_bits(f)))) << bits;
      EXPECT_EQ((bits & 0x7c00u), 0x7c00u);
    } else {
      EXPECT_EQ(float_to_half_bits(f), bits) << "bits 0x" << std::hex << bits;
    }
  }
}

TEST(HostHalf, KnownValues) {
  EXPECT_EQ(float_to_half_bits(1.0f), 0x3c00);
  EXPECT_EQ(float_to_half_bits(-2.0f), 0xc000);
  EXPECT_EQ(float_to_half_bits(-0.0f), 0x8000);
  EXPECT_EQ(float_to_half_bits(65504.0f), 0x7bff);
  EXPECT_EQ(float_to_half_bits(65519.996f), 0x7bff);
  EXPECT_EQ(float_to_half_bits(65520.0f), 0x7c00);  // tie rounds to even: infinity
  EXPECT_EQ(float_to_half_bits(std::numeric_limits<float>::infinity()), 0x7c00);
  EXPECT_EQ(float_to_half_bits(std::ldexp(1.0f, -24)), 0x0001);  // smallest subnormal
  EXPECT_EQ(float_to_half_bits(std::ldexp(1.0f, -25)), 0x0000);  // tie to even: zero
  EXPECT_EQ(float_to_half_bits(std::ldexp(1.5f, -25)), 0x0001);
  EXPECT_EQ(float_to_half_bits(std::ldexp(3.0f, -25)), 0x0002);         // tie 1.5 ulp: even is 2
  EXPECT_EQ(float_to_half_bits(1.0f + std::ldexp(1.0f, -11)), 0x3c00);  // tie: even
  EXPECT_EQ(float_to_half_bits(1.0f + std::ldexp(3.0f, -11)), 0x3c02);  // tie: even
  EXPECT_EQ(float_to_half_bits(std::ldexp(1023.0f / 1024.0f, -14) + std::ldexp(1.0f, -25)),
            0x0400);  // subnormal rounding up into the smallest normal
  EXPECT_EQ(half_bits_to_float(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(half_bits_to_float(0x03ff), std::ldexp(1023.0f, -24));
  EXPECT_TRUE(std::isnan(half_bits_to_float(float_to_half_bits(std::nanf("")))));
}

// float_to_half_bits must return the nearest half, ties to even, for any float.
TEST(HostHalf, RoundsToNearestEvenForRandomFloats) {
  for (uint64_t i = 0; i < 200000; ++i) {
    // Floats between 2^-27 and 2^17: subnormal, normal and overflowing halves.
    const uint32_t bits = 0x32000000u + static_cast<uint32_t>(mix64(i) % 0x16000000u);
    const float f = from_bits(bits);
    const uint16_t h = float_to_half_bits(f);
    const double got = half_bits_to_float(h);
    if (std::isinf(got)) {
      EXPECT_GE(f, 65520.0f);
      continue;
    }
    const double below = h > 0 ? half_bits_to_float(static_cast<uint16_t>(h - 1)) : -1.0;
    const double above = half_bits_to_float(static_cast<uint16_t>(h + 1));
    const double error = std::fabs(got - f);
    EXPECT_LE(error, std::fabs(f - below)) << f;
    EXPECT_LE(error, std::fabs(f - above)) << f;
    if (error == std::fabs(f - below) || error == std::fabs(f - above)) {
      EXPECT_EQ(h & 1, 0) << "tie not rounded to even at " << f;
    }
  }
}

TEST(HostBFloat16, EveryBitPatternRoundTrips) {
  for (uint32_t bits = 0; bits <= 0xffff; ++bits) {
    const float f = bfloat16_bits_to_float(static_cast<uint16_t>(bits));
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(bfloat16_bits_to_float(float_to_bfloat16_bits(f))));
    } else {
      EXPECT_EQ(float_to_bfloat16_bits(f), bits);
    }
  }
}

TEST(HostBFloat16, KnownValues) {
  EXPECT_EQ(float_to_bfloat16_bits(1.0f), 0x3f80);
  EXPECT_EQ(float_to_bfloat16_bits(1.0f + std::ldexp(1.0f, -8)), 0x3f80);  // tie: even
  EXPECT_EQ(float_to_bfloat16_bits(1.0f + std::ldexp(3.0f, -8)), 0x3f82);  // tie: even
  EXPECT_EQ(float_to_bfloat16_bits(1.0f + std::ldexp(1.5f, -8)), 0x3f81);
  EXPECT_EQ(float_to_bfloat16_bits(std::numeric_limits<float>::max()), 0x7f80);  // rounds to inf
  EXPECT_EQ(float_to_bfloat16_bits(-std::numeric_limits<float>::infinity()), 0xff80);
  EXPECT_TRUE(std::isnan(bfloat16_bits_to_float(float_to_bfloat16_bits(std::nanf("")))));
  // A NaN whose payload sits only in the low bits must stay NaN.
  EXPECT_TRUE(std::isnan(bfloat16_bits_to_float(float_to_bfloat16_bits(from_bits(0x7f800001u)))));
}

}  // namespace
}  // namespace cudaops::ref
