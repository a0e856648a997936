"""A Python process that keeps calling libcudaops, to attach a debugger to.

    python3 docs/debugging/python_loop.py [SECONDS]

Prints its pid, then runs cudaops.softmax on a CuPy or torch array (whichever is installed)
every 50 ms for SECONDS (default 120).
"""
import os
import sys
import time

import cudaops

seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 120.0
try:
    import cupy

    x = cupy.random.standard_normal((512, 1000), dtype=cupy.float32)
except ImportError:
    import torch

    x = torch.randn(512, 1000, device="cuda")
print(os.getpid(), flush=True)
end = time.monotonic() + seconds
while time.monotonic() < end:
    y = cudaops.softmax(x)
    time.sleep(0.05)
