// cudaops: run, check and benchmark any op of libcudaops from the command line.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <exception>
#include <new>
#include <string>
#include <vector>

#include "commands.h"
#include "common.h"
#include "cudaops/version.h"

namespace cudaops::cli {
namespace {

int run(int argc, char** argv) {
  CLI::App app{"cudaops: run, check and benchmark the operators of libcudaops", "cudaops"};
  // What a bug report needs: the version, the CUDA runtime built against and the GPU code carried.
  const int runtime = cudaops::build_cuda_runtime_version();
  const std::string version = std::string("cudaops ") + cudaops::version_string() +
                              " (CUDA runtime " + std::to_string(runtime / 1000) + "." +
                              std::to_string(runtime % 1000 / 10) + ", architectures " +
                              cudaops::build_cuda_architectures() + ")";
  app.set_version_flag("--version,-V", version);
  app.require_subcommand(1);
  const std::vector<Command> commands = {add_list_command(app),  add_run_command(app),
                                         add_bench_command(app), add_info_command(app),
                                         add_jit_command(app),   add_ivf_command(app)};
  // A first word that is no command and no option: say so (CLI11 would only say that a command
  // is required).
  std::string names;
  bool known = false;
  for (const Command& command : commands) {
    names += (names.empty() ? "" : ", ") + command.parser->get_name();
    known = known || (argc > 1 && command.parser->get_name() == argv[1]);
  }
  if (argc > 1 && argv[1][0] != '-' && !known) {
    std::fprintf(stderr,
                 "cudaops: unknown command '%s'; the commands are %s\nRun with --help for more "
                 "information.\n",
                 argv[1], names.c_str());
    return kExitUsage;
  }
  // `cudaops run OP --help`: that op's own options, then the options every op takes.
  if (argc > 3 && std::string(argv[1]) == "run") {
    bool help = false;
    for (int i = 3; i < argc; ++i)
      help = help || std::string(argv[i]) == "--help" || std::string(argv[i]) == "-h";
    if (const harness::OpDescriptor* op = harness::find_op(argv[2]); help && op != nullptr) {
      std::printf("cudaops run %s [options]\n\n", op->name.c_str());
      print_op(*op, 0);
      std::printf(
          "\nWithout --dtype: float32 where the op takes it, else its first dtype.\n"
          "The options every op takes (--check, --dtype, --offset, --iters, --calls, "
          "--json, ...): cudaops run --help\n");
      return kExitOk;
    }
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& e) {  // --help, --version
    return app.exit(e) == 0 ? kExitOk : kExitUsage;
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "cudaops: %s\nRun with --help for more information.\n", e.what());
    return kExitUsage;
  }
  // A --json caller reads one JSON document on stdout whatever happens.
  bool json = false;
  for (int i = 1; i < argc; ++i)
    json = json || std::string(argv[i]) == "--json";
  try {
    for (const Command& command : commands) {
      if (command.parser->parsed()) return command.execute();
    }
  } catch (const UsageError& e) {
    std::fprintf(stderr, "cudaops: %s\nRun with --help for more information.\n", e.message.c_str());
    if (json) print_json_error("usage", e.message);
    return kExitUsage;
  } catch (const std::bad_alloc&) {
    // Sizes the machine cannot hold (host buffers for the reference, the inputs' images).
    std::fprintf(stderr, "cudaops: out of host memory for this problem; try smaller sizes\n");
    if (json) print_json_error("out of host memory", "try smaller sizes");
    return kExitCheckFailed;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cudaops: %s\n", e.what());
    if (json) print_json_error("failed", e.what());
    return kExitCheckFailed;
  }
  return kExitUsage;
}

}  // namespace
}  // namespace cudaops::cli

int main(int argc, char** argv) {
  try {
    return cudaops::cli::run(argc, argv);
  } catch (const std::exception& e) {  // the parser's own set-up, or a message that failed
    std::fprintf(stderr, "cudaops: %s\n", e.what());
  } catch (...) {
    std::fprintf(stderr, "cudaops: an unknown error\n");
  }
  return cudaops::cli::kExitCheckFailed;
}
