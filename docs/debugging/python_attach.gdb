# Attach to a Python process that is calling libcudaops, stop at its next kernel, detach.
#   cuda-gdb -batch -x docs/debugging/python_attach.gdb -p <pid>
set pagination off
set confirm off
# Stop at the first instruction of the next kernel the program launches.
set cuda break_on_launch application
continue
info cuda kernels
backtrace 1
set cuda break_on_launch none
detach
