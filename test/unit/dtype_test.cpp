#include "cudaops/dtype.h"

#include <gtest/gtest.h>

namespace cudaops {
namespace {

TEST(DType, NamesAndSizes) {
  EXPECT_STREQ(dtype_name(DType::kFloat32), "float32");
  EXPECT_STREQ(dtype_name(DType::kFloat16), "float16");
  EXPECT_STREQ(dtype_name(DType::kBFloat16), "bfloat16");
  EXPECT_STREQ(dtype_name(DType::kInt32), "int32");
  EXPECT_STREQ(dtype_name(DType::kInt64), "int64");
  EXPECT_EQ(dtype_size(DType::kFloat32), 4);
  EXPECT_EQ(dtype_size(DType::kFloat16), 2);
  EXPECT_EQ(dtype_size(DType::kBFloat16), 2);
  EXPECT_EQ(dtype_size(DType::kInt32), 4);
  EXPECT_EQ(dtype_size(DType::kInt64), 8);
  EXPECT_TRUE(dtype_is_floating(DType::kBFloat16));
  EXPECT_FALSE(dtype_is_floating(DType::kInt64));
}

TEST(DType, OutOfRangeValue) {
  const auto bogus = static_cast<DType>(42);
  EXPECT_STREQ(dtype_name(bogus), "invalid");
  EXPECT_EQ(dtype_size(bogus), 0);
  EXPECT_FALSE(dtype_is_floating(bogus));
}

TEST(DType, ParsesCanonicalNamesAndAliases) {
  const struct {
    const char* text;
    DType want;
  } cases[] = {
      {"float32", DType::kFloat32}, {"fp32", DType::kFloat32},      {"F32", DType::kFloat32},
      {"float", DType::kFloat32},   {"float16", DType::kFloat16},   {"fp16", DType::kFloat16},
      {"Half", DType::kFloat16},    {"bfloat16", DType::kBFloat16}, {"BF16", DType::kBFloat16},
      {"int32", DType::kInt32},     {"i32", DType::kInt32},         {"int64", DType::kInt64},
      {"i64", DType::kInt64},
  };
  for (const auto& c : cases) {
    DType parsed = DType::kInt64;
    ASSERT_TRUE(parse_dtype(c.text, &parsed).ok()) << c.text;
    EXPECT_EQ(parsed, c.want) << c.text;
  }
}

TEST(DType, NameRoundTrips) {
  for (DType d :
       {DType::kFloat32, DType::kFloat16, DType::kBFloat16, DType::kInt32, DType::kInt64}) {
    DType parsed;
    ASSERT_TRUE(parse_dtype(dtype_name(d), &parsed).ok());
    EXPECT_EQ(parsed, d);
  }
}

TEST(DType, RejectsUnknownNamesAndLeavesOutputAlone) {
  for (const char* text : {"", "int8", "float64", "fp8", "float32 "}) {
    DType parsed = DType::kBFloat16;
    const Status status = parse_dtype(text, &parsed);
    EXPECT_EQ(status.code(), StatusCode::kUnsupportedDtype) << text;
    EXPECT_NE(status.message().find(std::string("'") + text + "'"), std::string::npos)
        << status.message();
    EXPECT_EQ(parsed, DType::kBFloat16);
  }
  EXPECT_EQ(parse_dtype("float32", nullptr).code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace cudaops
