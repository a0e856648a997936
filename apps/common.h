#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "cudaops/dtype.h"
#include "cudaops/status.h"
#include "harness/json.h"
#include "harness/registry.h"
#include "harness/timing.h"
#include "reference/compare.h"

namespace cudaops::cli {

// Exit codes of the `cudaops` command.
inline constexpr int kExitOk = 0;
inline constexpr int kExitCheckFailed = 1;  ///< a result was wrong, or the op failed
inline constexpr int kExitUsage = 2;        ///< bad command line
inline constexpr int kExitNoGpu = 3;        ///< no usable CUDA device or driver

/// A usage error found after parsing: printed by main, exit code 2.
struct UsageError {
  std::string message;
};

/// Options shared by `run` and `bench`.
struct TimingOptions {
  int warmup = 10;
  int iters = 50;
  int calls = 1;  ///< calls back to back per timed run
  int device = 0;
  bool json = false;
  uint64_t seed = 1;
};

void add_timing_options(CLI::App* command, TimingOptions* options);

/// Validators with short messages: an integer >= 0, an integer >= 1.
const CLI::Validator& non_negative_integer();
const CLI::Validator& positive_integer();

/// The dtype --dtype names (empty: float32 where the op takes it, else its first), or a
/// UsageError naming what the op takes.
DType dtype_for_op(const harness::OpDescriptor& op, const std::string& text);

/// Comma-separated dtype names of an op.
std::string dtype_list(const harness::OpDescriptor& op);

/// Prints "cudaops: no usable CUDA device: <why>" and returns false when there is none, after
/// selecting options.device.
bool select_device(int device, bool json);

/// Measures the copy yardstick (timed in runs of `calls` copies) and prints nothing; exits
/// through the returned status.
Status copy_yardstick(double* gbps, int calls);

/// Prints "cudaops: <doing>: <status>" on stderr and, with `json`, {"error", "reason"} on
/// stdout, so that a --json caller always reads one JSON document. Returns kExitCheckFailed.
int report_failure(const Status& status, const char* doing, bool json = false);
void print_json_error(const std::string& error, const std::string& reason);

/// One op on one problem, measured.
struct CaseReport {
  std::string op;
  DType dtype = DType::kFloat32;
  harness::Dims dims;
  int64_t offset = 0;
  int64_t bytes = 0;
  harness::Timing timing;
  double gbps = 0.0;
  double copy_gbps = 0.0;
  double pct_of_copy = 0.0;
  double matched_copy_gbps = 0.0;  ///< a copy moving the case's bytes; 0 when not measured
  double pct_of_matched_copy = 0.0;
  bool checked = false;
  ref::CompareResult check;
  std::string launch;        ///< the kernel the op takes (OpCase::launch); may be empty
  double flops = 0.0;        ///< of the matrix products (OpCase::flops); 0 for other ops
  double tflops = 0.0;       ///< flops / median time
  double gemm_tflops = 0.0;  ///< a cuBLAS GEMM of the same operations (gemm_yardstick)
  double pct_of_gemm = 0.0;
};

/// Makes the case, checks it against the reference when `check` is set, then times it.
Status measure_case(const harness::OpDescriptor& op, const harness::CaseConfig& config,
                    const TimingOptions& timing, bool check, double copy_gbps, cudaStream_t stream,
                    CaseReport* report);

void write_report_json(harness::JsonWriter& w, const CaseReport& report);

}  // namespace cudaops::cli
