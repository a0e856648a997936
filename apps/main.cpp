// cudaops: run, check and benchmark any op of libcudaops from the command line.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <vector>

#include "commands.h"
#include "common.h"
#include "cudaops/version.h"

int main(int argc, char** argv) {
  using namespace cudaops::cli;
  CLI::App app{"cudaops: run, check and benchmark the operators of libcudaops", "cudaops"};
  app.set_version_flag("--version", cudaops::version_string());
  app.require_subcommand(1);
  const std::vector<Command> commands = {add_list_command(app), add_run_command(app),
                                         add_bench_command(app), add_info_command(app),
                                         add_jit_command(app)};
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);
    return code == 0 ? kExitOk : kExitUsage;
  }
  try {
    for (const Command& command : commands) {
      if (command.parser->parsed()) return command.execute();
    }
  } catch (const UsageError& e) {
    std::fprintf(stderr, "cudaops: %s\nRun with --help for more information.\n", e.message.c_str());
    return kExitUsage;
  }
  return kExitUsage;
}
