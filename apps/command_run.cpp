#include <cstdio>
#include <map>
#include <memory>
#include <set>
#include <string>

#include "commands.h"
#include "common.h"
#include "harness/cuda_util.h"

namespace cudaops::cli {
namespace {

struct RunOptions {
  std::string op;
  std::string dtype;  // empty: the op's default (dtype_for_op)
  int64_t offset = 0;
  bool check = false;
  TimingOptions timing;
  std::map<std::string, int64_t> dims;  // every size option any op has
  std::map<std::string, CLI::Option*> dim_options;
  std::set<std::string> flags;  // the size options that are switches (0 unless given)
};

/// Whether the size option `name` was on the command line. A switch counts as given only when
/// set: some CLI11 versions count a switch that was not given as one result (its default).
bool given(const RunOptions& options, const std::string& name) {
  if (options.flags.count(name) != 0) return options.dims.at(name) != 0;
  return options.dim_options.at(name)->count() > 0;
}

int execute(RunOptions& options) {
  const harness::OpDescriptor* op = harness::find_op(options.op);
  if (op == nullptr) {
    std::string names;
    for (const auto& known : harness::registered_ops())
      names += " " + known.name;
    throw UsageError{"unknown op '" + options.op + "'; the ops are:" + names};
  }
  harness::CaseConfig config;
  config.dtype = dtype_for_op(*op, options.dtype);
  config.seed = options.timing.seed;
  config.offset = options.offset;
  std::set<std::string> own;
  for (const auto& spec : op->dims) {
    own.insert(spec.name);
    config.dims.emplace_back(
        spec.name, given(options, spec.name) ? options.dims.at(spec.name) : spec.default_value);
  }
  for (const auto& [name, option] : options.dim_options) {
    if (given(options, name) && own.count(name) == 0) {
      throw UsageError{"--" + name + " is not a size of " + op->name};
    }
  }
  if (op->validate) {
    if (Status s = op->validate(config); !s.ok()) throw UsageError{s.message()};
  }
  if (!select_device(options.timing.device, options.timing.json)) return kExitNoGpu;

  harness::Stream stream;
  Status status = stream.create();
  double copy_gbps = 0.0;
  if (status.ok()) status = copy_yardstick(&copy_gbps, options.timing.calls);
  if (!status.ok()) return report_failure(status, "measuring copy bandwidth", options.timing.json);
  CaseReport report;
  status =
      measure_case(*op, config, options.timing, options.check, copy_gbps, stream.get(), &report);
  if (!status.ok()) return report_failure(status, op->name.c_str(), options.timing.json);

  if (options.timing.json) {
    harness::JsonWriter w;
    write_report_json(w, report);
    std::printf("%s\n", w.str().c_str());
  } else {
    std::printf("%s %s %s offset=%lld\n", op->name.c_str(), dtype_name(config.dtype),
                harness::format_dims(config.dims).c_str(), static_cast<long long>(config.offset));
    if (!report.launch.empty()) std::printf("  path:  %s\n", report.launch.c_str());
    if (report.checked) std::printf("  check: %s\n", report.check.describe().c_str());
    std::printf("  time:  %.2f us median of %d (min %.2f, max %.2f)%s\n",
                report.timing.median_ms * 1e3, report.timing.iterations, report.timing.min_ms * 1e3,
                report.timing.max_ms * 1e3,
                report.timing.calls > 1
                    ? (", per call of runs of " + std::to_string(report.timing.calls)).c_str()
                    : "");
    if (report.flops > 0) {
      std::printf(
          "  rate:  %.1f TFLOP/s for %.4g FLOP of products = %.1f%% of a cuBLAS GEMM of "
          "the same (%.1f TFLOP/s)\n",
          report.tflops, report.flops, report.pct_of_gemm, report.gemm_tflops);
    } else {
      std::printf("  rate:  %.1f GB/s for %lld bytes = %.1f%% of device copy (%.1f GB/s)\n",
                  report.gbps, static_cast<long long>(report.bytes), report.pct_of_copy, copy_gbps);
    }
  }
  return report.checked && !report.check.ok() ? kExitCheckFailed : kExitOk;
}

}  // namespace

Command add_run_command(CLI::App& app) {
  auto options = std::make_shared<RunOptions>();
  CLI::App* parser = app.add_subcommand("run", "run one op on random inputs: check it and time it");
  parser->add_option("op", options->op, "op name (see `cudaops list`)")->required();
  parser->add_option("--dtype", options->dtype,
                     "float32, float16 or bfloat16 (default: float32 where the op takes it, else "
                     "its first dtype, as `cudaops list` shows)");
  parser->add_flag("--check", options->check,
                   "compare with the double-precision CPU reference (exit 1 if over tolerance)");
  parser
      ->add_option("--offset", options->offset,
                   "move every device pointer this many elements off 256-byte alignment")
      ->check(non_negative_integer())
      ->capture_default_str();
  add_timing_options(parser, &options->timing);
  for (const auto& op : harness::registered_ops()) {
    for (const auto& spec : op.dims) {
      if (options->dim_options.count(spec.name)) continue;
      options->dims[spec.name] = spec.default_value;
      int64_t& target = options->dims[spec.name];
      if (spec.flag) {
        options->dim_options[spec.name] = parser->add_flag("--" + spec.name, target, spec.help);
        options->flags.insert(spec.name);
      } else if (!spec.words.empty()) {
        const std::map<std::string, int64_t> words(spec.words.begin(), spec.words.end());
        options->dim_options[spec.name] =
            parser->add_option("--" + spec.name, target, spec.help)
                ->transform(CLI::CheckedTransformer(words, CLI::ignore_case));
      } else {
        options->dim_options[spec.name] =
            parser->add_option("--" + spec.name, target, spec.help)->check(non_negative_integer());
      }
    }
  }
  return {parser, [options]() { return execute(*options); }};
}

}  // namespace cudaops::cli
