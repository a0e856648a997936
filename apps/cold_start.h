#pragma once

#include <string>

namespace cudaops::cli {

/// `cudaops info --cold-start`: starts this program again once per loading mode (lazy, eager,
/// and forced PTX JIT when the binary carries PTX the device can use), each time in a fresh
/// process, and prints what each step of a cold start cost. Returns the exit code.
int cold_start_report(const std::string& op, const std::string& device_name, bool ptx_usable,
                      bool json);

/// The measuring side, run in the started process: prints one "name milliseconds" line per step.
int cold_start_child(const std::string& op);

}  // namespace cudaops::cli
