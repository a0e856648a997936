#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "commands.h"
#include "common.h"
#include "harness/cuda_util.h"

namespace cudaops::cli {
namespace {

struct BenchOptions {
  std::vector<std::string> ops;
  std::vector<std::string> dtypes;
  std::vector<int64_t> offsets = {0, 1};
  bool all_sizes = false;
  bool check = false;
  bool markdown = false;
  TimingOptions timing;
};

void print_row(const CaseReport& r, bool markdown) {
  const std::string check = !r.checked ? "-" : (r.check.ok() ? "ok" : "FAILED");
  if (markdown) {
    std::printf("| %s | %s | %s | %lld | %.2f | %.1f | %.1f%% | %s |\n", r.op.c_str(),
                dtype_name(r.dtype), harness::format_dims(r.dims).c_str(),
                static_cast<long long>(r.offset), r.timing.median_ms * 1e3, r.gbps, r.pct_of_copy,
                check.c_str());
  } else {
    std::printf("%-12s %-9s %-28s %6lld %12.2f %10.1f %8.1f%% %7s\n", r.op.c_str(),
                dtype_name(r.dtype), harness::format_dims(r.dims).c_str(),
                static_cast<long long>(r.offset), r.timing.median_ms * 1e3, r.gbps, r.pct_of_copy,
                check.c_str());
  }
  std::fflush(stdout);
}

int execute(BenchOptions& options) {
  std::vector<const harness::OpDescriptor*> ops;
  if (options.ops.empty()) {
    for (const auto& op : harness::registered_ops())
      ops.push_back(&op);
  }
  for (const std::string& name : options.ops) {
    const harness::OpDescriptor* op = harness::find_op(name);
    if (op == nullptr) throw UsageError{"unknown op '" + name + "' (see `cudaops list`)"};
    ops.push_back(op);
  }
  std::vector<DType> wanted_dtypes;
  for (const std::string& text : options.dtypes) {
    DType dtype;
    const Status status = parse_dtype(text, &dtype);
    if (!status.ok()) throw UsageError{"--dtype: " + status.message()};
    wanted_dtypes.push_back(dtype);
  }

  if (!select_device(options.timing.device, options.timing.json)) return kExitNoGpu;

  harness::Stream stream;
  Status status = stream.create();
  double copy_gbps = 0.0;
  harness::Timing copy_timing;
  const int64_t copy_bytes = harness::default_copy_bytes();
  if (status.ok())
    status = harness::measure_copy_bandwidth(copy_bytes, 3, 20, &copy_gbps, &copy_timing);
  if (!status.ok()) return report_failure(status, "measuring copy bandwidth");

  harness::JsonWriter w;
  if (options.timing.json) {
    w.begin_object().key("copy").begin_object().key("bytes").value(2 * copy_bytes);
    w.key("time_us").value(copy_timing.median_ms * 1e3).key("gbps").value(copy_gbps).end_object();
    w.key("results").begin_array();
  } else if (options.markdown) {
    std::printf("| op | dtype | shape | offset | time (us) | GB/s | of copy | check |\n");
    std::printf("|---|---|---|---:|---:|---:|---:|---|\n");
    std::printf("| copy (D2D) | - | bytes=%lld | 0 | %.2f | %.1f | 100.0%% | - |\n",
                static_cast<long long>(2 * copy_bytes), copy_timing.median_ms * 1e3, copy_gbps);
  } else {
    std::printf("device-to-device copy: %.1f GB/s (%lld bytes read + written, median %.2f us)\n\n",
                copy_gbps, static_cast<long long>(2 * copy_bytes), copy_timing.median_ms * 1e3);
    std::printf("%-12s %-9s %-28s %6s %12s %10s %9s %7s\n", "op", "dtype", "shape", "offset",
                "time (us)", "GB/s", "of copy", "check");
  }

  bool all_ok = true;
  for (const harness::OpDescriptor* op : ops) {
    std::vector<DType> dtypes;
    for (DType dtype : op->dtypes) {
      if (wanted_dtypes.empty() ||
          std::find(wanted_dtypes.begin(), wanted_dtypes.end(), dtype) != wanted_dtypes.end()) {
        dtypes.push_back(dtype);
      }
    }
    const auto& shapes = options.all_sizes ? op->bench_shapes : op->headline_shapes;
    for (DType dtype : dtypes) {
      for (const harness::Dims& dims : shapes) {
        for (int64_t offset : options.offsets) {
          harness::CaseConfig config{dtype, dims, options.timing.seed, offset};
          CaseReport report;
          status = measure_case(*op, config, options.timing, options.check, copy_gbps, stream.get(),
                                &report);
          if (!status.ok()) {
            return report_failure(status, (op->name + " " + harness::format_dims(dims)).c_str());
          }
          all_ok = all_ok && (!report.checked || report.check.ok());
          if (options.timing.json) {
            write_report_json(w, report);
          } else {
            print_row(report, options.markdown);
          }
        }
      }
    }
  }
  if (options.timing.json) {
    w.end_array().end_object();
    std::printf("%s\n", w.str().c_str());
  }
  return all_ok ? kExitOk : kExitCheckFailed;
}

}  // namespace

Command add_bench_command(CLI::App& app) {
  auto options = std::make_shared<BenchOptions>();
  CLI::App* parser = app.add_subcommand(
      "bench", "time every op at its standard sizes against the device's copy bandwidth");
  parser->add_option("ops", options->ops, "ops to time (default: all)");
  parser->add_option("--dtype", options->dtypes, "dtypes to time (default: each op's)");
  parser
      ->add_option("--offsets", options->offsets,
                   "pointer offsets in elements to time (default: 0 and 1)")
      ->delimiter(',')
      ->check(non_negative_integer());
  parser->add_flag("--all-sizes", options->all_sizes, "the whole size sweep of each op");
  parser->add_flag("--check", options->check, "also check every case against the reference");
  parser->add_flag("--markdown", options->markdown, "print the table as Markdown");
  add_timing_options(parser, &options->timing);
  return {parser, [options]() { return execute(*options); }};
}

}  // namespace cudaops::cli
