#include <gtest/gtest.h>

#include <cmath>

#include "harness/json.h"
#include "harness/registry.h"

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

}  // namespace
}  // namespace cudaops::harness
