#!/usr/bin/env python3
"""Per-call host overhead of cudaops.add(a, b, out=c) on tiny arrays, next to torch.add and
cupy.add on the same arrays in the same process.

Each figure is the median over repeats of (wall time of a loop of calls, with the device
synchronised at both ends) / calls. With tiny arrays the GPU finishes each kernel faster than the
host issues the next, so the figure is the host's cost per call. The target is at most 1.5x
torch.add's own time.
"""

import argparse
import json
import statistics
import sys
import time

import cudaops


def per_call_us(fn, sync, calls, repeats):
    for _ in range(max(calls // 10, 100)):
        fn()
    sync()
    samples = []
    for _ in range(repeats):
        sync()
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        sync()
        samples.append((time.perf_counter() - start) / calls * 1e6)
    return statistics.median(samples)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=256, help="elements per array")
    parser.add_argument("--calls", type=int, default=20000)
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    rows = []  # (what, microseconds per call)
    baseline = None
    try:
        import torch
    except ImportError:
        torch = None
    if torch is not None and torch.cuda.is_available():
        a = torch.rand(args.n, device="cuda")
        b = torch.rand(args.n, device="cuda")
        c = torch.empty_like(a)
        sync = torch.cuda.synchronize
        baseline = per_call_us(lambda: torch.add(a, b, out=c), sync, args.calls, args.repeats)
        rows.append(("torch.add(a, b, out=c)", baseline))
        cudaops._core._set_fast_paths(True)
        rows.append(("cudaops.add(a, b, out=c), torch tensors",
                     per_call_us(lambda: cudaops.add(a, b, out=c), sync, args.calls,
                                 args.repeats)))
        cudaops._core._set_fast_paths(False)
        rows.append(("cudaops.add(a, b, out=c), torch tensors through DLPack only",
                     per_call_us(lambda: cudaops.add(a, b, out=c), sync, args.calls,
                                 args.repeats)))
        cudaops._core._set_fast_paths(True)
        rows.append(("cudaops.add(a, b), torch tensors, new result",
                     per_call_us(lambda: cudaops.add(a, b), sync, args.calls, args.repeats)))
    try:
        import cupy
    except ImportError:
        cupy = None
    if cupy is not None:
        a = cupy.random.rand(args.n, dtype=cupy.float32)
        b = cupy.random.rand(args.n, dtype=cupy.float32)
        c = cupy.empty_like(a)
        sync = cupy.cuda.runtime.deviceSynchronize
        rows.append(("cupy.add(a, b, out=c)",
                     per_call_us(lambda: cupy.add(a, b, out=c), sync, args.calls, args.repeats)))
        rows.append(("cudaops.add(a, b, out=c), CuPy arrays",
                     per_call_us(lambda: cudaops.add(a, b, out=c), sync, args.calls,
                                 args.repeats)))

        class CAIOnly:
            def __init__(self, x):
                self.x = x

            @property
            def __cuda_array_interface__(self):
                return self.x.__cuda_array_interface__

        ca, cb, cc = CAIOnly(a), CAIOnly(b), CAIOnly(c)
        rows.append(("cudaops.add(a, b, out=c), CuPy arrays through __cuda_array_interface__",
                     per_call_us(lambda: cudaops.add(ca, cb, out=cc), sync, args.calls,
                                 args.repeats)))

    if args.json:
        print(json.dumps([{"what": w, "us_per_call": t,
                           "of_torch_add": (t / baseline if baseline else None)}
                          for w, t in rows], indent=2))
        return 0
    print(f"Per-call time on {args.n}-element float32 arrays (median of {args.repeats} loops of "
          f"{args.calls} calls)\n")
    if torch is not None:
        print(f"torch {torch.__version__} publishes the DLPack C exchange API: "
              f"{hasattr(torch.Tensor, '__dlpack_c_exchange_api__')}\n")
    print("| call | us per call | x torch.add |")
    print("|---|---:|---:|")
    for what, t in rows:
        ratio = f"{t / baseline:.2f}" if baseline else "-"
        print(f"| {what} | {t:.2f} | {ratio} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
