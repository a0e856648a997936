// The headers a compilation can read, by content, for the cache key.
//
// The scan follows every #include of the source and of the headers it finds, transitively,
// resolving names as NVRTC does: "quoted" names first in the including file's directory (the
// source's is the directory of its file name), then in the -I directories in order; <angled>
// names in the -I directories only. It takes every #include whether or not a surrounding #if
// branch is taken, so the set is a superset of what the compiler reads. A name found nowhere
// is recorded as absent, so that a header appearing later changes the key. Comments, line
// continuations and string literals are understood; a computed #include (a macro) cannot be
// followed and makes the result incomplete (not cacheable on disk).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "jit/sha256.h"

namespace cudaops::jit::detail {

struct Dependencies {
  Sha256::Digest digest{};           ///< over every resolution and every header's contents
  std::vector<std::string> headers;  ///< the headers found, in the order first reached
  bool complete = true;
  std::string incomplete_reason;  ///< why not complete
};

/// `source_dir`: the directory quoted includes of the source itself are searched in first.
Dependencies scan_dependencies(std::string_view source, const std::string& source_dir,
                               const std::vector<std::string>& include_dirs,
                               const std::vector<std::string>& pre_includes);

/// The #include directives of `text`, in order: (name, quoted), or name "" for a computed
/// include. Exposed for tests.
struct IncludeDirective {
  std::string name;
  bool quoted = false;
};
std::vector<IncludeDirective> find_includes(std::string_view text);

}  // namespace cudaops::jit::detail
