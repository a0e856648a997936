# Stop inside the top-k kernel while one GPU test runs.
#   cuda-gdb -batch -x docs/debugging/test_kernel.gdb --args \
#       build/debug/test/cudaops_gpu_topk_tests --gtest_filter='All/TopkShapes.MatchesReference/8'
set pagination off
set confirm off
set breakpoint pending on
break topk_values_kernel
run
# First the host-side launch stub, then the kernel on the GPU.
continue
info cuda kernels
print a
cuda thread (31,0,0)
print threadIdx
delete
continue
