#include "common.h"

#include "harness/gemm_yardstick.h"

#include <cuda_runtime_api.h>

#include <cstdio>
#include <exception>
#include <memory>
#include <string>

#include "harness/cuda_util.h"
#include "harness/json.h"
#include "harness/timing.h"

namespace cudaops::cli {

namespace {

CLI::Validator integer_at_least(long long minimum, const char* description) {
  return CLI::Validator(
      [minimum, description](std::string& text) -> std::string {
        long long value = 0;
        size_t used = 0;
        try {
          value = std::stoll(text, &used);
        } catch (const std::exception&) {
          used = 0;
        }
        if (used != text.size() || used == 0 || value < minimum) {
          return "expected " + std::string(description) + ", got '" + text + "'";
        }
        return std::string();
      },
      // No description: CLI11 would print it after the type in the help ("INT:an integer >= 0").
      "");
}

}  // namespace

const CLI::Validator& non_negative_integer() {
  static const CLI::Validator validator = integer_at_least(0, "an integer >= 0");
  return validator;
}

const CLI::Validator& positive_integer() {
  static const CLI::Validator validator = integer_at_least(1, "an integer >= 1");
  return validator;
}

void add_timing_options(CLI::App* command, TimingOptions* options) {
  command->add_option("--warmup", options->warmup, "untimed runs before timing")
      ->check(non_negative_integer())
      ->capture_default_str();
  command->add_option("--iters", options->iters, "timed runs; the median is reported")
      ->check(positive_integer())
      ->capture_default_str();
  command
      ->add_option("--calls", options->calls,
                   "calls back to back in each timed run (the copy yardstick's too); times are "
                   "per call")
      ->check(positive_integer())
      ->capture_default_str();
  command->add_option("--device", options->device, "CUDA device index")
      ->check(non_negative_integer())
      ->capture_default_str();
  command->add_option("--seed", options->seed, "seed of the random inputs")->capture_default_str();
  command->add_flag("--json", options->json, "machine-readable output");
}

std::string dtype_list(const harness::OpDescriptor& op) {
  std::string text;
  for (DType dtype : op.dtypes) {
    if (!text.empty()) text += ", ";
    text += dtype_name(dtype);
  }
  return text;
}

DType dtype_for_op(const harness::OpDescriptor& op, const std::string& text) {
  // No --dtype: float32 where the op takes it, else its first, so that every op's defaults run.
  if (text.empty()) {
    for (DType supported : op.dtypes) {
      if (supported == DType::kFloat32) return supported;
    }
    if (!op.dtypes.empty()) return op.dtypes.front();
  }
  DType dtype;
  if (!parse_dtype(text, &dtype).ok()) {
    throw UsageError{"--dtype: unknown dtype '" + text + "'; " + op.name + " takes " +
                     dtype_list(op)};
  }
  for (DType supported : op.dtypes) {
    if (supported == dtype) return dtype;
  }
  throw UsageError{"--dtype: " + op.name + " does not support " + dtype_name(dtype) +
                   "; it supports " + dtype_list(op)};
}

bool select_device(int device, bool json) {
  std::string why;
  bool usable = harness::cuda_device_usable(&why);
  if (usable) {
    int count = 0;
    cudaGetDeviceCount(&count);
    if (device >= count) {
      why = "--device " + std::to_string(device) + " does not exist (" + std::to_string(count) +
            " visible)";
      usable = false;
    } else if (cudaSetDevice(device) != cudaSuccess) {
      why = std::string("cudaSetDevice failed: ") + cudaGetErrorString(cudaGetLastError());
      usable = false;
    }
  }
  if (!usable) {
    if (json) {
      harness::JsonWriter w;
      w.begin_object()
          .key("error")
          .value("no usable CUDA device")
          .key("reason")
          .value(why)
          .end_object();
      std::printf("%s\n", w.str().c_str());
    }
    std::fprintf(stderr, "cudaops: no usable CUDA device: %s\n", why.c_str());
  }
  return usable;
}

Status copy_yardstick(double* gbps, int calls) {
  return harness::measure_copy_bandwidth(harness::default_copy_bytes(), 3, 20, gbps, nullptr,
                                         calls);
}

int report_failure(const Status& status, const char* doing, bool json) {
  std::fprintf(stderr, "cudaops: %s: %s\n", doing, status.to_string().c_str());
  if (json) print_json_error(doing, status.to_string());
  return kExitCheckFailed;
}

void print_json_error(const std::string& error, const std::string& reason) {
  harness::JsonWriter w;
  w.begin_object().key("error").value(error).key("reason").value(reason).end_object();
  std::printf("%s\n", w.str().c_str());
  std::fflush(stdout);
}

Status measure_case(const harness::OpDescriptor& op, const harness::CaseConfig& config,
                    const TimingOptions& timing, bool check, double copy_gbps, cudaStream_t stream,
                    CaseReport* report) {
  report->op = op.name;
  report->dtype = config.dtype;
  report->dims = config.dims;
  report->offset = config.offset;
  report->copy_gbps = copy_gbps;
  std::unique_ptr<harness::OpCase> c;
  Status status = op.make_case(config, &c);
  if (!status.ok()) return status;
  report->bytes = c->bytes_moved();
  report->launch = c->launch();
  if (check) {
    status = c->check(stream, &report->check);
    if (!status.ok()) return status;
    report->checked = true;
  }
  status = harness::time_on_stream([&](cudaStream_t s) { return c->run(s); }, stream, timing.warmup,
                                   timing.iters, &report->timing, timing.calls);
  if (!status.ok()) return status;
  report->gbps = harness::gb_per_s(report->bytes, report->timing.median_ms);
  report->pct_of_copy = copy_gbps > 0 ? 100.0 * report->gbps / copy_gbps : 0.0;
  report->flops = c->flops();
  if (report->flops > 0) {
    report->tflops = report->flops / (report->timing.median_ms * 1e-3) / 1e12;
    status = harness::gemm_yardstick(config.dtype, report->flops, &report->gemm_tflops);
    if (!status.ok()) return status;
    report->pct_of_gemm =
        report->gemm_tflops > 0 ? 100.0 * report->tflops / report->gemm_tflops : 0.0;
  }
  return Status();
}

void write_report_json(harness::JsonWriter& w, const CaseReport& report) {
  w.begin_object().key("op").value(report.op).key("dtype").value(dtype_name(report.dtype));
  w.key("dims").begin_object();
  for (const auto& [name, value] : report.dims)
    w.key(name).value(value);
  w.end_object();
  w.key("offset").value(report.offset).key("bytes").value(report.bytes);
  if (!report.launch.empty()) w.key("launch").value(report.launch);
  w.key("time_us").begin_object();
  w.key("median").value(report.timing.median_ms * 1e3).key("min").value(report.timing.min_ms * 1e3);
  w.key("max").value(report.timing.max_ms * 1e3).key("iterations").value(report.timing.iterations);
  w.key("calls").value(report.timing.calls);
  w.end_object();
  w.key("gbps").value(report.gbps).key("copy_gbps").value(report.copy_gbps);
  w.key("pct_of_copy").value(report.pct_of_copy);
  if (report.flops > 0) {
    w.key("flops").value(report.flops).key("tflops").value(report.tflops);
    w.key("gemm_tflops").value(report.gemm_tflops).key("pct_of_gemm").value(report.pct_of_gemm);
  }
  if (report.matched_copy_gbps > 0) {
    w.key("matched_copy_gbps").value(report.matched_copy_gbps);
    w.key("pct_of_matched_copy").value(report.pct_of_matched_copy);
  }
  w.key("check");
  if (report.checked) {
    w.begin_object()
        .key("ok")
        .value(report.check.ok())
        .key("max_error")
        .value(report.check.max_error);
    w.key("tolerance")
        .value(report.check.tolerance.rel)
        .key("mismatches")
        .value(report.check.mismatches);
    w.key("detail").value(report.check.describe()).end_object();
  } else {
    w.null();
  }
  w.end_object();
}

}  // namespace cudaops::cli
