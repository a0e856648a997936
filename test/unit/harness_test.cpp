#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <memory>
#include <stdexcept>

#include "harness/device_buffer.h"
#include "harness/json.h"
#include "harness/registry.h"
#include "reference/host_array.h"

namespace cudaops::harness {
namespace {

TEST(Registry, HasTheElementwiseOps) {
  for (const char* name : {"add", "add_scalar"}) {
    const OpDescriptor* op = find_op(name);
    ASSERT_NE(op, nullptr) << name;
    EXPECT_EQ(op->name, name);
    EXPECT_EQ(op->dtypes.size(), 3u);
    ASSERT_EQ(op->dims.size(), 1u);
    EXPECT_EQ(op->dims[0].name, "n");
    EXPECT_FALSE(op->bench_shapes.empty());
    EXPECT_FALSE(op->headline_shapes.empty());
    EXPECT_TRUE(static_cast<bool>(op->make_case));
  }
  EXPECT_EQ(find_op("no_such_op"), nullptr);
}

TEST(Registry, SortedAndUnique) {
  const auto& ops = registered_ops();
  for (size_t i = 1; i < ops.size(); ++i)
    EXPECT_LT(ops[i - 1].name, ops[i].name);
  OpDescriptor duplicate;
  duplicate.name = "add";
  EXPECT_FALSE(register_op(duplicate));
}

TEST(Registry, Dims) {
  const Dims dims = {{"rows", 4096}, {"cols", 1024}};
  EXPECT_EQ(dim_value(dims, "cols"), 1024);
  EXPECT_EQ(dim_value(dims, "k", -1), -1);
  EXPECT_EQ(format_dims(dims), "rows=4096 cols=1024");
  EXPECT_EQ(default_dims(*find_op("add")), (Dims{{"n", int64_t{1} << 24}}));
}

TEST(Json, WritesNestedValues) {
  JsonWriter w;
  w.begin_object().key("op").value("add").key("n").value(int64_t{7}).key("ok").value(true);
  w.key("list").begin_array().value(1.5).value("x\"y\n").null().end_array();
  w.key("nan").value(std::nan("")).end_object();
  EXPECT_EQ(w.str(), R"({"op":"add","n":7,"ok":true,"list":[1.5,"x\"y\n",null],"nan":null})");
  EXPECT_EQ(json_escape(std::string("a\x01", 2)), "a\\u0001");
}

TEST(Registry, CasesWhoseSizesOverflowAreRefusedBeforeAnyBuffer) {
  struct Case {
    const char* op;
    Dims dims;
  };
  const int64_t big = int64_t{1} << 62;
  const Case cases[] = {
      {"add", {{"n", big}}},
      {"add_scalar", {{"n", big}}},
      {"softmax", {{"rows", int64_t{1} << 32}, {"cols", int64_t{1} << 32}, {"pad", 0}}},
      {"rms_norm", {{"rows", 1}, {"cols", big}, {"pad", 0}}},
      {"topk", {{"rows", int64_t{1} << 40}, {"cols", 4096}, {"k", 8}, {"pad", int64_t{1} << 30}}},
  };
  for (const Case& c : cases) {
    CaseConfig config;
    config.dims = c.dims;
    std::unique_ptr<OpCase> made;
    const Status status = find_op(c.op)->make_case(config, &made);
    EXPECT_EQ(status.code(), StatusCode::kInvalidArgument) << c.op << ": " << status.message();
    EXPECT_EQ(made, nullptr) << c.op;
  }
  EXPECT_THROW(ref::HostArray(DType::kFloat32, big), std::length_error);
  DeviceArray device;
  EXPECT_EQ(device.allocate(DType::kFloat32, big, 0).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(device.allocate(DType::kFloat32, INT64_MAX, 1).code(), StatusCode::kInvalidArgument);
}

TEST(Json, BytesThatAreNotUtf8BecomeReplacementCharacters) {
  EXPECT_EQ(json_escape("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"),
            "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80");
  EXPECT_EQ(json_escape("a\xff"), "a\\ufffd");                                 // never a UTF-8 byte
  EXPECT_EQ(json_escape("\xc3"), "\\ufffd");                                   // cut short
  EXPECT_EQ(json_escape("\xc0\xaf"), "\\ufffd\\ufffd");                        // overlong '/'
  EXPECT_EQ(json_escape("\xed\xa0\x80"), "\\ufffd\\ufffd\\ufffd");             // a surrogate
  EXPECT_EQ(json_escape("\xf4\x90\x80\x80"), "\\ufffd\\ufffd\\ufffd\\ufffd");  // past U+10FFFF
}

}  // namespace
}  // namespace cudaops::harness
