#pragma once

// One kernel of each family (each CUDA source of the library), for kernel_family_info(): asking
// the runtime about it says how the device runs that source's code.

namespace cudaops::detail {

const void* elementwise_family_kernel();

namespace rowwise {
const void* softmax_family_kernel();
const void* norm_family_kernel();
const void* reduce_family_kernel();
}  // namespace rowwise

namespace topk {
const void* topk_family_kernel();
}  // namespace topk

}  // namespace cudaops::detail
