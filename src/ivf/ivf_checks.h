#pragma once

// The IVF index's argument checks and layouts (host only), shared by its entry points: the build
// and extension (ivf_api.cpp), the search and retrieval (ivf_search_api.cpp) and the files
// (ivf_files_api.cpp). Each returns a status naming `op` and the argument.
#include <cstddef>
#include <cstdint>
#include <string>

#include "cudaops/ivf.h"
#include "cudaops/status.h"
#include "ivf/ivf_plan.h"

namespace cudaops::detail::ivf {

Status invalid(const char* op, const std::string& text);

Status check_shape(const char* op, const IvfShape& s);
/// The shape checked and laid out.
Status layout_of(const char* op, const IvfShape& s, IvfLayout* l);
Status check_params(const char* op, const IvfShape& s, int64_t seq, const IvfBuildParams& params);
Status build_layout(const char* op, const IvfShape& s, int64_t seq, const IvfBuildParams& params,
                    BuildLayout* l);
/// An index that holds tokens and clusters within its capacity (as ivf_build leaves it).
Status check_held(const char* op, const IvfIndex& index);
/// The extension's sizes: every argument but the memory checked, the workspace laid out.
Status extend_layout(const char* op, const IvfIndex& index, const IvfInput& input,
                     const IvfExtendParams& params, ExtendLayout* l);
/// The search's sizes: every argument but the memory checked, the workspace laid out.
Status search_layout(const char* op, const IvfIndex& index, const IvfQueries& queries,
                     const IvfSearchParams& params, int64_t* max_candidates, SearchLayout* l);
/// The sizes of ivf_clusters (max_tokens 0) or ivf_retrieve: every argument but the memory
/// checked, the workspace laid out; *rows the result's rows.
Status probe_layout(const char* op, const IvfIndex& index, const IvfQueries& queries,
                    const IvfProbeParams& params, int64_t max_tokens, bool retrieve, int64_t* rows,
                    ProbeLayout* l);

/// index.data (called `name` in messages) set and 256-byte aligned.
Status check_index_data(const char* op, const IvfIndex& index, const char* name);
/// The index's and the queries' pointers of a search, clusters or retrieval call.
Status check_probe_memory(const char* op, const IvfIndex& index, const IvfQueries& queries);
/// `bytes` of workspace at least `needed` (as the size query `query` gives), set and aligned.
Status check_workspace(const char* op, const char* query, void* workspace, size_t bytes,
                       size_t needed);
/// The memory of a build or an extension: the index's buffer, the input's keys and values, the
/// workspace (`needed` bytes, as `query` gives), none overlapping another that is written.
Status check_input_memory(const char* op, const IvfIndex& index, const IvfInput& input,
                          size_t index_bytes, void* workspace, size_t workspace_bytes,
                          size_t needed, const char* query);
/// A built index's layout and pointer (save).
Status check_built(const char* op, const IvfIndex& index, IvfLayout* layout);

}  // namespace cudaops::detail::ivf
