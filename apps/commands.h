#pragma once

#include <CLI/CLI.hpp>

#include <functional>

#include "harness/registry.h"

namespace cudaops::cli {

/// A subcommand: its CLI11 parser and what runs when it was chosen (returns the exit code;
/// may throw UsageError).
struct Command {
  CLI::App* parser = nullptr;
  std::function<int()> execute;
};

Command add_list_command(CLI::App& app);
/// One op as `cudaops list` and `cudaops run OP --help` show it: summary, dtypes and its own
/// options with their meanings and defaults, the names indented past `width` columns.
void print_op(const harness::OpDescriptor& op, int width);
Command add_run_command(CLI::App& app);
Command add_bench_command(CLI::App& app);
Command add_info_command(CLI::App& app);
Command add_jit_command(CLI::App& app);
Command add_ivf_command(CLI::App& app);

}  // namespace cudaops::cli
