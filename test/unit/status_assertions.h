#pragma once

// Shared by the validation tests: addresses never dereferenced, and an assertion on a status's
// code and the words its message must name.
#include <gtest/gtest.h>

#include <cstdint>
#include <initializer_list>
#include <string>

#include "cudaops/status.h"

namespace cudaops::testing {

/// An address that validation must refuse or pass without touching.
inline void* fake(uintptr_t address) {
  return reinterpret_cast<void*>(address);
}

/// Success when `status` has `code` and its message contains every word of `words`.
inline ::testing::AssertionResult FailsWith(const Status& status, StatusCode code,
                                            std::initializer_list<const char*> words) {
  if (status.code() != code) {
    return ::testing::AssertionFailure()
           << "got " << status.to_string() << ", expected code " << status_code_name(code);
  }
  for (const char* word : words) {
    if (status.message().find(word) == std::string::npos) {
      return ::testing::AssertionFailure()
             << "message '" << status.message() << "' does not name '" << word << "'";
    }
  }
  return ::testing::AssertionSuccess();
}

}  // namespace cudaops::testing
