#include "cold_start.h"

#include <cuda_runtime_api.h>
#include <limits.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "common.h"
#include "cudaops/kernels.h"
#include "harness/json.h"
#include "harness/registry.h"

namespace cudaops::cli {
namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

struct Step {
  const char* key;
  const char* label;
  const char* why;  // one sentence
};

constexpr Step kSteps[] = {
    {"driver", "driver initialisation",
     "cudaGetDeviceCount: loading libcuda and initialising the driver (cuInit), once per "
     "process."},
    {"context", "context creation",
     "cudaFree(0): creating the device's primary context; under eager loading it also loads "
     "the code of every kernel the program carries."},
    {"inputs", "inputs made",
     "the op's inputs generated on the host and copied to new device buffers (the first "
     "allocations of the process)."},
    {"first_launch", "first launch",
     "the op's first call, to completion: under lazy loading it loads the op's kernels first, "
     "and under forced PTX JIT it also compiles them."},
    {"steady", "steady state",
     "median of 50 further calls, each timed on the host from the call to its completion."},
    {"modules", "kernel families loaded",
     "one kernel of each family touched for the first time (cudaFuncGetAttributes): the "
     "loading that lazy mode defers and eager mode already did."},
};

struct Mode {
  const char* name;
  std::vector<std::pair<const char*, const char*>> env;
};

// Runs `exe` with `args` and extra environment variables; returns its standard output.
bool run_child(const std::string& exe, const std::vector<std::string>& args,
               const std::vector<std::pair<const char*, const char*>>& env, std::string* out,
               int* exit_code) {
  int fds[2];
  if (pipe(fds) != 0) return false;
  const pid_t pid = fork();
  if (pid < 0) return false;
  if (pid == 0) {
    for (const auto& [name, value] : env)
      setenv(name, value, 1);
    dup2(fds[1], STDOUT_FILENO);
    close(fds[0]);
    close(fds[1]);
    std::vector<char*> argv;
    argv.push_back(const_cast<char*>(exe.c_str()));
    for (const auto& a : args)
      argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execv(exe.c_str(), argv.data());
    _exit(127);
  }
  close(fds[1]);
  char buffer[4096];
  ssize_t n;
  while ((n = read(fds[0], buffer, sizeof buffer)) > 0)
    out->append(buffer, static_cast<size_t>(n));
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  *exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128;
  return true;
}

std::map<std::string, std::string> parse_lines(const std::string& text) {
  std::map<std::string, std::string> values;
  size_t at = 0;
  while (at < text.size()) {
    size_t end = text.find('\n', at);
    if (end == std::string::npos) end = text.size();
    const std::string line = text.substr(at, end - at);
    const size_t space = line.find(' ');
    if (space != std::string::npos) values[line.substr(0, space)] = line.substr(space + 1);
    at = end + 1;
  }
  return values;
}

// The smallest of the op's sweep shapes: a cold start is about fixed costs, not bandwidth.
harness::Dims smallest_shape(const harness::OpDescriptor& op) {
  harness::Dims best = harness::default_dims(op);
  double best_size = -1;
  for (const harness::Dims& dims : op.bench_shapes) {
    double size = 1;
    for (const auto& d : dims)
      size *= static_cast<double>(d.second);
    if (best_size < 0 || size < best_size) {
      best = dims;
      best_size = size;
    }
  }
  return best;
}

}  // namespace

int cold_start_child(const std::string& op_name) {
  const harness::OpDescriptor* op = harness::find_op(op_name);
  if (op == nullptr) return kExitUsage;
  auto fail = [](const char* step, cudaError_t error) {
    std::printf("error %s: %s\n", step, cudaGetErrorString(error));
    return kExitCheckFailed;
  };
  Clock::time_point t = Clock::now();
  int count = 0;
  cudaError_t error = cudaGetDeviceCount(&count);
  if (error != cudaSuccess) return fail("driver", error);
  std::printf("driver %.3f\n", ms_since(t));

  t = Clock::now();
  error = cudaSetDevice(0);
  if (error == cudaSuccess) error = cudaFree(nullptr);
  if (error != cudaSuccess) return fail("context", error);
  std::printf("context %.3f\n", ms_since(t));

  harness::CaseConfig config;
  config.dtype = op->dtypes.front();
  config.dims = smallest_shape(*op);
  std::printf("case %s %s\n", dtype_name(config.dtype), harness::format_dims(config.dims).c_str());
  t = Clock::now();
  std::unique_ptr<harness::OpCase> c;
  Status status = op->make_case(config, &c);
  if (!status.ok()) {
    std::printf("error inputs: %s\n", status.message().c_str());
    return kExitCheckFailed;
  }
  error = cudaDeviceSynchronize();
  if (error != cudaSuccess) return fail("inputs", error);
  std::printf("inputs %.3f\n", ms_since(t));

  auto call = [&]() {
    Status run = c->run(nullptr);
    const cudaError_t sync = cudaStreamSynchronize(nullptr);
    if (run.ok() && sync != cudaSuccess)
      run = Status(StatusCode::kCudaError, cudaGetErrorString(sync));
    return run;
  };
  t = Clock::now();
  status = call();
  const double first = ms_since(t);
  if (!status.ok()) {
    std::printf("error first_launch: %s\n", status.message().c_str());
    return kExitCheckFailed;
  }
  std::printf("first_launch %.3f\n", first);
  std::vector<double> times;
  for (int i = 0; i < 50; ++i) {
    t = Clock::now();
    status = call();
    times.push_back(ms_since(t));
    if (!status.ok()) {
      std::printf("error steady: %s\n", status.message().c_str());
      return kExitCheckFailed;
    }
  }
  std::nth_element(times.begin(), times.begin() + 25, times.end());
  std::printf("steady %.3f\n", times[25]);

  t = Clock::now();
  for (int i = 0; i < kernel_family_count(); ++i) {
    KernelFamilyInfo info;
    status = kernel_family_info(i, &info);
    if (!status.ok()) {
      std::printf("error modules: %s\n", status.message().c_str());
      return kExitCheckFailed;
    }
  }
  std::printf("modules %.3f\n", ms_since(t));
  return kExitOk;
}

int cold_start_report(const std::string& op_name, const std::string& device_name, bool ptx_usable,
                      bool json) {
  if (harness::find_op(op_name) == nullptr) {
    throw UsageError{"--op: no op named '" + op_name + "' (cudaops list shows them)"};
  }
  char exe[PATH_MAX];
  const ssize_t length = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (length <= 0) {
    std::fprintf(stderr, "cudaops: --cold-start: cannot find this program (/proc/self/exe)\n");
    return kExitCheckFailed;
  }
  exe[length] = '\0';
  std::vector<Mode> modes = {
      {"lazy", {{"CUDA_MODULE_LOADING", "LAZY"}}},
      {"eager", {{"CUDA_MODULE_LOADING", "EAGER"}}},
  };
  if (ptx_usable) {
    modes.push_back({"ptx-jit",
                     {{"CUDA_MODULE_LOADING", "LAZY"},
                      {"CUDA_FORCE_PTX_JIT", "1"},
                      {"CUDA_CACHE_DISABLE", "1"}}});
  }
  std::vector<std::map<std::string, std::string>> results;
  int exit_code = kExitOk;
  for (const Mode& mode : modes) {
    std::string out;
    int code = 0;
    if (!run_child(exe, {"info", "--op", op_name, "--cold-start-child", mode.name}, mode.env, &out,
                   &code)) {
      std::fprintf(stderr, "cudaops: --cold-start: could not start %s\n", exe);
      return kExitCheckFailed;
    }
    results.push_back(parse_lines(out));
    if (code != 0) {
      const auto error = results.back().find("error");
      if (error != results.back().end()) {
        std::fprintf(stderr, "cudaops: %s loading: %s\n", mode.name, error->second.c_str());
      }
      exit_code = kExitCheckFailed;
    }
  }
  const std::string case_text = results.empty() ? "" : results[0]["case"];
  if (json) {
    harness::JsonWriter w;
    w.begin_object().key("device").value(device_name).key("op").value(op_name);
    w.key("case").value(case_text).key("modes").begin_array();
    for (size_t m = 0; m < modes.size(); ++m) {
      w.begin_object().key("loading").value(modes[m].name);
      for (const Step& step : kSteps) {
        auto it = results[m].find(step.key);
        if (it == results[m].end()) {
          w.key(std::string(step.key) + "_ms").null();
        } else {
          w.key(std::string(step.key) + "_ms").value(std::atof(it->second.c_str()));
        }
      }
      w.end_object();
    }
    w.end_array().end_object();
    std::printf("%s\n", w.str().c_str());
    return exit_code;
  }
  std::printf("\ncold start of %s (%s) on device 0, %s; each column is a new process\n",
              op_name.c_str(), case_text.c_str(), device_name.c_str());
  std::printf("  %-24s", "");
  for (const Mode& mode : modes)
    std::printf(" %12s", mode.name);
  std::printf("\n");
  for (const Step& step : kSteps) {
    std::printf("  %-24s", step.label);
    for (auto& r : results) {
      auto it = r.find(step.key);
      if (it == r.end()) {
        std::printf(" %12s", "-");
      } else {
        std::printf(" %9.3f ms", std::atof(it->second.c_str()));
      }
    }
    std::printf("\n");
  }
  std::printf("\n");
  for (const Step& step : kSteps)
    std::printf("  %s: %s\n", step.label, step.why);
  std::printf(
      "  Loading modes: lazy is CUDA's default (CUDA_MODULE_LOADING=LAZY), eager loads "
      "everything with the context%s.\n",
      ptx_usable ? ", and ptx-jit forces the driver to compile this binary's PTX with "
                   "its cache off (CUDA_FORCE_PTX_JIT=1, CUDA_CACHE_DISABLE=1), as a "
                   "GPU newer than every SASS of the build would"
                 : "");
  return exit_code;
}

}  // namespace cudaops::cli
