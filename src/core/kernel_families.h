#pragma once

// The kernel families that kernel_family_info() reports (one per CUDA source that an op family
// wants reported): each source registers one of its kernels next to the code, so that adding an
// op edits no central list. Asking the runtime about that kernel says how the device runs the
// source's code (SASS for its architecture, or PTX compiled by the driver).

namespace cudaops::detail {

struct KernelFamily {
  const char* name;         // "softmax", "kmeans", ...
  const char* source;       // the source file that holds it
  const void* (*kernel)();  // one kernel of that source
};

/// Adds `family` to the reported list (kept sorted by name); returns true, so that a source can
/// register from a static initialiser: CUDAOPS_KERNEL_FAMILY below.
bool register_kernel_family(const KernelFamily& family);

}  // namespace cudaops::detail

/// Registers the kernel family NAME of source SOURCE, reported through KERNEL_FN (a function
/// returning one of the source's kernels), at load time. Use once per source, at namespace scope.
#define CUDAOPS_KERNEL_FAMILY(NAME, SOURCE, KERNEL_FN)                   \
  [[maybe_unused]] static const bool cudaops_kernel_family_registered_ = \
      ::cudaops::detail::register_kernel_family(                         \
          ::cudaops::detail::KernelFamily{NAME, SOURCE, KERNEL_FN})
