#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "commands.h"
#include "common.h"
#include "harness/cuda_util.h"
#include "harness/svg_chart.h"

namespace cudaops::cli {
namespace {

struct BenchOptions {
  std::vector<std::string> ops;
  std::vector<std::string> dtypes;
  std::vector<int64_t> offsets = {0, 1};
  bool all_sizes = false;
  bool check = false;
  bool markdown = false;
  bool no_progress = false;
  bool matched_copy = false;
  std::string svg;
  TimingOptions timing;
};

// Progress on stderr once a run has taken a few seconds: on a terminal one line rewritten in
// place (cleared before each result row), elsewhere a line every 15 seconds at most.
class Progress {
 public:
  Progress(int total, bool enabled)
      : total_(total), enabled_(enabled), tty_(isatty(STDERR_FILENO) != 0), start_(Clock::now()) {}

  void begin_case(int index, const std::string& what) {
    if (!enabled_) return;
    const double elapsed = seconds(start_);
    if (elapsed < kQuietSeconds) return;
    if (!tty_ && shown_ && seconds(last_) < kLogEverySeconds) return;
    std::string eta;
    if (index > 0) {
      const double left = elapsed / index * (total_ - index);
      eta = ", about " + std::to_string(std::llround(left)) + " s left";
    }
    std::fprintf(stderr, "%s[%d/%d] %s (%lld s%s)%s", tty_ ? "\r\033[K" : "", index + 1, total_,
                 what.c_str(), static_cast<long long>(elapsed), eta.c_str(), tty_ ? "" : "\n");
    std::fflush(stderr);
    shown_ = true;
    line_open_ = tty_;
    last_ = Clock::now();
  }

  /// Before anything is printed to stdout: a terminal shows both streams on one screen.
  void clear() {
    if (!line_open_) return;
    std::fprintf(stderr, "\r\033[K");
    std::fflush(stderr);
    line_open_ = false;
  }

 private:
  using Clock = std::chrono::steady_clock;
  static constexpr double kQuietSeconds = 3.0;
  static constexpr double kLogEverySeconds = 15.0;
  static double seconds(Clock::time_point t) {
    return std::chrono::duration<double>(Clock::now() - t).count();
  }
  int total_;
  bool enabled_;
  bool tty_;
  bool shown_ = false;
  bool line_open_ = false;
  Clock::time_point start_;
  Clock::time_point last_;
};

std::string case_label(const CaseReport& r) {
  std::string label = std::string(dtype_name(r.dtype)) + " " + harness::format_dims(r.dims);
  if (r.offset != 0) label += " +" + std::to_string(r.offset);
  return label;
}

Status write_svg(const std::string& path, const std::vector<CaseReport>& reports, double copy_gbps,
                 const std::string& device) {
  std::vector<harness::ChartBar> bars;
  bars.reserve(reports.size());
  for (const CaseReport& r : reports)
    bars.push_back({r.op, case_label(r), r.gbps});
  const std::string svg = harness::bar_chart_svg("libcudaops: achieved bandwidth on " + device,
                                                 "GB/s", bars, copy_gbps, "copy");
  std::ofstream out(path, std::ios::binary);
  out << svg;
  out.close();
  if (!out) {
    return Status(StatusCode::kInvalidArgument, "--svg: cannot write '" + path + "'");
  }
  return Status();
}

void print_row(const CaseReport& r, bool markdown, bool matched) {
  const std::string check = !r.checked ? "-" : (r.check.ok() ? "ok" : "FAILED");
  if (r.flops > 0) {  // bound by its products: TFLOP/s against a GEMM of the same operations
    std::printf(markdown ? "| %s | %s | %s | %lld | %.2f | %.1f TFLOP/s | %.1f%% of GEMM |%s %s |\n"
                         : "%-12s %-9s %-28s %6lld %12.2f %7.1f TF/s %6.1f%% GEMM%s %7s\n",
                r.op.c_str(), dtype_name(r.dtype), harness::format_dims(r.dims).c_str(),
                static_cast<long long>(r.offset), r.timing.median_ms * 1e3, r.tflops, r.pct_of_gemm,
                matched ? (markdown ? " - |" : "         -") : "", check.c_str());
    std::fflush(stdout);
    return;
  }
  char extra[32] = "";
  if (markdown) {
    if (matched) std::snprintf(extra, sizeof(extra), " %.1f%% |", r.pct_of_matched_copy);
    std::printf("| %s | %s | %s | %lld | %.2f | %.1f | %.1f%% |%s %s |\n", r.op.c_str(),
                dtype_name(r.dtype), harness::format_dims(r.dims).c_str(),
                static_cast<long long>(r.offset), r.timing.median_ms * 1e3, r.gbps, r.pct_of_copy,
                extra, check.c_str());
  } else {
    if (matched) std::snprintf(extra, sizeof(extra), " %8.1f%%", r.pct_of_matched_copy);
    std::printf("%-12s %-9s %-28s %6lld %12.2f %10.1f %8.1f%%%s %7s\n", r.op.c_str(),
                dtype_name(r.dtype), harness::format_dims(r.dims).c_str(),
                static_cast<long long>(r.offset), r.timing.median_ms * 1e3, r.gbps, r.pct_of_copy,
                extra, check.c_str());
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

  if (!options.svg.empty()) {  // fail before the run, not after it; leave no empty file
    const bool existed = access(options.svg.c_str(), F_OK) == 0;
    if (!std::ofstream(options.svg, std::ios::app)) {
      throw UsageError{"--svg: cannot write '" + options.svg + "'"};
    }
    if (!existed) std::remove(options.svg.c_str());
  }
  if (!select_device(options.timing.device, options.timing.json)) return kExitNoGpu;

  harness::Stream stream;
  Status status = stream.create();
  double copy_gbps = 0.0;
  harness::Timing copy_timing;
  const int64_t copy_bytes = harness::default_copy_bytes();
  if (status.ok())
    status = harness::measure_copy_bandwidth(copy_bytes, 3, 20, &copy_gbps, &copy_timing,
                                             options.timing.calls);
  if (!status.ok()) return report_failure(status, "measuring copy bandwidth", options.timing.json);

  harness::JsonWriter w;
  if (options.timing.json) {
    w.begin_object().key("copy").begin_object().key("bytes").value(2 * copy_bytes);
    w.key("time_us").value(copy_timing.median_ms * 1e3).key("gbps").value(copy_gbps);
    w.key("calls").value(copy_timing.calls).end_object();
    w.key("results").begin_array();
  } else if (options.markdown) {
    const bool m = options.matched_copy;
    if (options.timing.calls > 1) {
      std::printf("Times per call, of timed runs of %d calls back to back (the copies' too).\n\n",
                  options.timing.calls);
    }
    std::printf("| op | dtype | shape | offset | time (us) | GB/s | of copy |%s check |\n",
                m ? " of same-size copy |" : "");
    std::printf("|---|---|---|---:|---:|---:|---:|%s---|\n", m ? "---:|" : "");
    std::printf("| copy (D2D) | - | bytes=%lld | 0 | %.2f | %.1f | 100.0%% |%s - |\n",
                2 * static_cast<long long>(copy_bytes), copy_timing.median_ms * 1e3, copy_gbps,
                m ? " - |" : "");
  } else {
    if (options.timing.calls > 1) {
      std::printf("times per call, of timed runs of %d calls back to back (the copies' too)\n",
                  options.timing.calls);
    }
    std::printf("device-to-device copy: %.1f GB/s (%lld bytes read + written, median %.2f us)\n\n",
                copy_gbps, 2 * static_cast<long long>(copy_bytes), copy_timing.median_ms * 1e3);
    std::printf("%-12s %-9s %-28s %6s %12s %10s %9s%s %7s\n", "op", "dtype", "shape", "offset",
                "time (us)", "GB/s", "of copy", options.matched_copy ? "   same-size" : "",
                "check");
  }

  struct Planned {
    const harness::OpDescriptor* op;
    harness::CaseConfig config;
  };
  std::vector<Planned> plan;
  for (const harness::OpDescriptor* op : ops) {
    const auto& shapes = options.all_sizes ? op->bench_shapes : op->headline_shapes;
    for (DType dtype : op->dtypes) {
      if (!wanted_dtypes.empty() &&
          std::find(wanted_dtypes.begin(), wanted_dtypes.end(), dtype) == wanted_dtypes.end()) {
        continue;
      }
      for (const harness::Dims& dims : shapes) {
        for (int64_t offset : options.offsets) {
          plan.push_back({op, harness::CaseConfig{dtype, dims, options.timing.seed, offset}});
        }
      }
    }
  }

  bool all_ok = true;
  std::vector<CaseReport> reports;
  Progress progress(static_cast<int>(plan.size()), !options.no_progress);
  for (size_t i = 0; i < plan.size(); ++i) {
    const Planned& p = plan[i];
    progress.begin_case(static_cast<int>(i), p.op->name + " " + dtype_name(p.config.dtype) + " " +
                                                 harness::format_dims(p.config.dims));
    CaseReport report;
    status = measure_case(*p.op, p.config, options.timing, options.check, copy_gbps, stream.get(),
                          &report);
    if (status.ok() && options.matched_copy) {
      // A copy moving the case's bytes (half read, half written), timed the same way.
      status = harness::measure_copy_bandwidth(
          std::max<int64_t>(report.bytes / 2, 1), options.timing.warmup, options.timing.iters,
          &report.matched_copy_gbps, nullptr, options.timing.calls);
      report.pct_of_matched_copy =
          report.matched_copy_gbps > 0 ? 100.0 * report.gbps / report.matched_copy_gbps : 0.0;
    }
    progress.clear();
    if (!status.ok()) {
      return report_failure(status,
                            (p.op->name + " " + harness::format_dims(p.config.dims)).c_str(),
                            options.timing.json);
    }
    all_ok = all_ok && (!report.checked || report.check.ok());
    if (options.timing.json) {
      write_report_json(w, report);
    } else {
      print_row(report, options.markdown, options.matched_copy);
    }
    reports.push_back(report);
  }
  if (options.timing.json) {
    w.end_array().end_object();
    std::printf("%s\n", w.str().c_str());
  }
  if (!options.svg.empty()) {
    cudaDeviceProp prop{};
    std::string device = "device " + std::to_string(options.timing.device);
    if (cudaGetDeviceProperties(&prop, options.timing.device) == cudaSuccess) device = prop.name;
    status = write_svg(options.svg, reports, copy_gbps, device);
    if (!status.ok()) return report_failure(status, "writing the chart");  // the JSON is out
    std::fprintf(stderr, "cudaops: wrote %s (%zu bars)\n", options.svg.c_str(), reports.size());
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
  parser->add_flag("--matched-copy", options->matched_copy,
                   "also time a copy moving each case's bytes and report the case against it");
  parser->add_option("--svg", options->svg,
                     "also write a bar chart of each case's bandwidth against the copy "
                     "bandwidth to this SVG file");
  parser->add_flag("--no-progress", options->no_progress,
                   "no progress line on stderr (shown once a run takes more than 3 seconds)");
  add_timing_options(parser, &options->timing);
  return {parser, [options]() { return execute(*options); }};
}

}  // namespace cudaops::cli
