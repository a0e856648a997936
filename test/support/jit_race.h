#pragma once

// Several processes compiling one request at once into the same disk cache, for the JIT tests
// with and without a GPU. Each child clears its memory cache first, so that it really compiles
// and stores; none may fail or give up storing its entry.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <vector>

#include "cudaops/jit.h"

namespace cudaops::test {

inline ::testing::AssertionResult CompileInRacingProcesses(const jit::CompileRequest& request,
                                                           int processes) {
  std::vector<pid_t> children;
  for (int c = 0; c < processes; ++c) {
    const pid_t pid = fork();
    if (pid < 0) return ::testing::AssertionFailure() << "fork failed";
    if (pid == 0) {
      (void)jit::clear_cache(true, false);
      jit::Kernel kernel;
      const Status status = jit::compile(request, &kernel);
      _exit(status.ok() && kernel.info().not_stored_reason.empty() ? 0 : 1);
    }
    children.push_back(pid);
  }
  ::testing::AssertionResult result = ::testing::AssertionSuccess();
  for (pid_t pid : children) {
    int status = 0;
    if (waitpid(pid, &status, 0) != pid) {
      result = ::testing::AssertionFailure() << "waitpid failed for child " << pid;
    } else if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      result = ::testing::AssertionFailure() << "child " << pid << " failed to compile or store";
    }
  }
  return result;
}

}  // namespace cudaops::test
