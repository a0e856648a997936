# Stop inside an elementwise kernel launched by the CLI, look around, let it finish.
#   cuda-gdb -batch -x docs/debugging/cli_kernel.gdb \
#       --args build/debug/apps/cudaops run add --n 4099 --iters 1 --warmup 0
set pagination off
set confirm off
# The kernel's code is loaded only when it is first launched (lazy loading): keep the
# breakpoint pending until then.
set breakpoint pending on
break elementwise_vec_kernel
run
# The first stop is the host-side launch stub, which has the kernel's name; the next is the
# kernel itself, on the GPU.
continue
info cuda kernels
# Focus on thread 5 of block 0, step three source lines in it, print its locals.
cuda block (0,0,0) thread (5,0,0)
next 3
print first
print num_items
delete
continue
