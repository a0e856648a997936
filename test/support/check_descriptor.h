#pragma once

// Runs one case of an op through its harness descriptor: makes the inputs, runs the op and
// compares with the reference. The failure message starts with `what` (the case, printed).
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "harness/registry.h"
#include "reference/compare.h"

namespace cudaops::testing {

inline ::testing::AssertionResult CheckDescriptorCase(const std::string& op_name,
                                                      const harness::CaseConfig& config,
                                                      cudaStream_t stream,
                                                      const std::string& what) {
  const harness::OpDescriptor* op = harness::find_op(op_name);
  if (op == nullptr) return ::testing::AssertionFailure() << "no descriptor " << op_name;
  std::unique_ptr<harness::OpCase> op_case;
  Status status = op->make_case(config, &op_case);
  if (!status.ok()) return ::testing::AssertionFailure() << what << ": " << status.to_string();
  ref::CompareResult result;
  status = op_case->check(stream, &result);
  if (!status.ok()) return ::testing::AssertionFailure() << what << ": " << status.to_string();
  if (!result.ok()) return ::testing::AssertionFailure() << what << ": " << result.describe();
  return ::testing::AssertionSuccess();
}

}  // namespace cudaops::testing
