#!/usr/bin/env python3
"""Host cost per call of every op of the module from Python, next to torch's and CuPy's own ops.

Each op runs on small arrays (64 x 256 float32 by default), where the GPU finishes each kernel
before the host has issued the next, so that a stream of calls measures the host's cost per call:
the median over repeats of (wall time of a loop of calls, the device synchronised at both ends) /
calls. "One call" is the median wall time of a single call between two synchronisations. Each op
is timed making new results and, where it takes out=, writing into given arrays; with torch
tensors against torch's op, and with CuPy arrays against CuPy's op where CuPy has one (else
torch's). Top-k also runs in streams of 20 calls at its standard shapes, timed by CUDA events,
next to the C++ time the CLI measures in the same way (--cli). With torch, the ops registered by
cudaops.torch (torch.ops.cudaops.*) are timed next to the direct calls: the dispatcher's cost.
"""

import argparse
import json
import statistics
import subprocess
import sys
import time

import cudaops

ROWS, COLS = 64, 256
TOPK_SHAPES = [(64, 65536, 64), (64, 65536, 1024), (1024, 4096, 32)]


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


def one_call_us(fn, sync, repeats=200):
    for _ in range(20):
        fn()
    samples = []
    for _ in range(repeats):
        sync()
        start = time.perf_counter()
        fn()
        sync()
        samples.append((time.perf_counter() - start) * 1e6)
    return statistics.median(samples)


def shared_cases(x, y, w, out, theirs):
    """The ops timed with both frameworks' arrays: (op, results, cudaops new-result call, cudaops
    out= call or None, the framework's own call from `theirs` or None)."""
    return [
        ("add", 1, lambda: cudaops.add(x, y), lambda: cudaops.add(x, y, out=out),
         theirs.get("add")),
        ("add_scalar", 1, lambda: cudaops.add_scalar(x, 1.5),
         lambda: cudaops.add_scalar(x, 1.5, out=out), theirs.get("add_scalar")),
        ("softmax", 1, lambda: cudaops.softmax(x), lambda: cudaops.softmax(x, out=out),
         theirs.get("softmax")),
        ("rms_norm", 1, lambda: cudaops.rms_norm(x, w, 1e-6),
         lambda: cudaops.rms_norm(x, w, 1e-6, out=out), theirs.get("rms_norm")),
        ("topk", 2, lambda: cudaops.topk(x, 8), None, theirs.get("topk")),
    ]


def torch_arrays(torch):
    """The torch inputs both torch benches use: x, y [ROWS, COLS], w, b [COLS] float32, and keys
    [2, 1024, 64] float16 for an index."""
    dev = "cuda"
    return (torch.randn(ROWS, COLS, device=dev), torch.randn(ROWS, COLS, device=dev),
            torch.randn(COLS, device=dev), torch.randn(COLS, device=dev),
            torch.randn(2, 1024, 64, device=dev, dtype=torch.float16))


def torch_cases(torch):
    """(op, results, cudaops new-result call, cudaops out= call or None, torch call or None)."""
    dev = "cuda"
    x, y, w, b, keys = torch_arrays(torch)
    out = torch.empty_like(x)
    _, mean, rstd = cudaops.layer_norm(x, w, b, 1e-5, return_stats=True)
    _, rms_rstd = cudaops.rms_norm(x, w, 1e-6, return_rstd=True)
    aten = torch.ops.aten
    mean_t, rstd_t = mean.view(ROWS, 1), rstd.view(ROWS, 1)
    f = torch.nn.functional

    def maybe(name):
        return getattr(aten, name, None)

    fused_rms = maybe("_fused_rms_norm")
    fused_rms_bwd = maybe("_fused_rms_norm_backward")
    res = torch.randn(ROWS, COLS, device=dev)
    points = torch.randn(4, 64, 16, device=dev)
    index = cudaops.ivf.build_global(keys, keys, 32, 2)
    queries = torch.randn(2, 1, 64, device=dev, dtype=torch.float16)
    return shared_cases(x, y, w, out, {
        "add": lambda: torch.add(x, y),
        "add_scalar": lambda: torch.add(x, 1.5),
        "softmax": lambda: torch.softmax(x, -1),
        "rms_norm": lambda: f.rms_norm(x, (COLS,), w, 1e-6),
        "topk": lambda: torch.topk(x, 8),
    }) + [
        ("softmax_backward", 1, lambda: cudaops.softmax_backward(x, y),
         lambda: cudaops.softmax_backward(x, y, out=out),
         lambda: aten._softmax_backward_data(y, x, -1, x.dtype)),
        ("layer_norm", 1, lambda: cudaops.layer_norm(x, w, b, 1e-5),
         lambda: cudaops.layer_norm(x, w, b, 1e-5, out=out),
         lambda: f.layer_norm(x, (COLS,), w, b, 1e-5)),
        ("layer_norm, return_stats", 3, lambda: cudaops.layer_norm(x, w, b, 1e-5,
                                                                   return_stats=True), None,
         lambda: aten.native_layer_norm(x, [COLS], w, b, 1e-5)),
        ("layer_norm_backward", 3, lambda: cudaops.layer_norm_backward(y, x, w, mean, rstd), None,
         lambda: aten.native_layer_norm_backward(y, x, [COLS], mean_t, rstd_t, w, b,
                                                 [True, True, True])),
        ("rms_norm, return_rstd", 2, lambda: cudaops.rms_norm(x, w, 1e-6, return_rstd=True), None,
         (lambda: fused_rms(x, [COLS], w, 1e-6)) if fused_rms else None),
        ("rms_norm_backward", 2, lambda: cudaops.rms_norm_backward(y, x, w, rms_rstd), None,
         (lambda: fused_rms_bwd(y, x, [COLS], rms_rstd.view(ROWS, 1), w, [True, True]))
         if fused_rms_bwd else None),
        ("fused_add_rms_norm (in place)", 0, None,
         lambda: cudaops.fused_add_rms_norm(x, res, w, 1e-6),
         lambda: f.rms_norm(res.add_(x), (COLS,), w, 1e-6)),
        # No torch op: the module's own cost, for the record.
        ("kmeans (4 problems of 64 x 16, k 4, 1 iteration)", 3,
         lambda: cudaops.kmeans(points, 4, n_iters=1), None, None),
        ("ivf Index.search (2 heads, 1024 tokens, k 16)", 2,
         lambda: index.search(queries, 16, 4), None, None),
    ]


def registered_cases(torch):
    """(op, direct cudaops call, the same op through torch.ops.cudaops), torch tensors."""
    import cudaops.torch as ct
    x, y, w, b, keys = torch_arrays(torch)
    index = ct.Index(cudaops.ivf.build_global(keys, keys, 32, 2, n_iters=2))
    queries = torch.randn(8, 1, 64, device="cuda", dtype=torch.float16)
    stream = torch.cuda.current_stream().cuda_stream
    return [
        ("add", lambda: cudaops.add(x, y, stream=stream), lambda: ct.add(x, y)),
        ("softmax", lambda: cudaops.softmax(x, stream=stream), lambda: ct.softmax(x)),
        ("layer_norm", lambda: cudaops.layer_norm(x, w, b, return_stats=True, stream=stream),
         lambda: ct.layer_norm(x, w, b)),
        ("rms_norm", lambda: cudaops.rms_norm(x, w, return_rstd=True, stream=stream),
         lambda: ct.rms_norm(x, w)),
        ("topk", lambda: cudaops.topk(x, 8, stream=stream), lambda: ct.topk(x, 8)),
        ("ivf_attention", lambda: index.index.attention(queries, 4, 8, return_lse=True,
                                                        stream=stream),
         lambda: ct.ivf_attention(index, queries, 4, 8)),
    ]


def cupy_cases(cupy):
    """(op, results, cudaops new-result call, cudaops out= call, CuPy's own call or None)."""
    x = cupy.random.rand(ROWS, COLS, dtype=cupy.float32)
    y = cupy.random.rand(ROWS, COLS, dtype=cupy.float32)
    w = cupy.random.rand(COLS, dtype=cupy.float32)
    out = cupy.empty_like(x)
    import cupyx.scipy.special as cupyx_special

    return shared_cases(x, y, w, out, {
        "add": lambda: cupy.add(x, y),
        "add_scalar": lambda: cupy.add(x, 1.5),
        "softmax": lambda: cupyx_special.softmax(x, axis=-1),
    })


def cli_topk_us(cli):
    """{(rows, cols, k): C++ microseconds per call in runs of 20} from `cudaops bench topk`."""
    text = subprocess.run([cli, "bench", "topk", "--dtype", "float32", "--offsets", "0", "--calls",
                           "20", "--json", "--no-progress"], check=True, capture_output=True,
                          text=True).stdout
    found = {}
    for r in json.loads(text)["results"]:
        d = r["dims"]
        found[(d["rows"], d["cols"], d["k"])] = r["time_us"]["median"]
    return found


def topk_streams(torch, reps=25, inner=20):
    """{(rows, cols, k): (cudaops us, torch us)} per call in runs of `inner` calls."""
    found = {}
    for rows, cols, k in TOPK_SHAPES:
        # The CLI's inputs: magnitudes uniform in [0.5, 2) with a random sign (a selection's time
        # depends on the values' distribution).
        u = torch.rand(rows, cols, device="cuda", dtype=torch.float64)
        sign = torch.where(torch.rand_like(u) < 0.5, -1.0, 1.0)
        x = (sign * (0.5 + 1.5 * u)).float()
        times = []
        for fn in (lambda: cudaops.topk(x, k), lambda: torch.topk(x, k)):
            for _ in range(3 * inner):
                fn()
            torch.cuda.synchronize()
            samples = []
            for _ in range(reps):
                start = torch.cuda.Event(enable_timing=True)
                stop = torch.cuda.Event(enable_timing=True)
                start.record()
                for _ in range(inner):
                    fn()
                stop.record()
                stop.synchronize()
                samples.append(start.elapsed_time(stop) / inner * 1e3)
            times.append(statistics.median(samples))
        found[(rows, cols, k)] = tuple(times)
    return found


def ratio(a, b):
    return a / b if a is not None and b else None


def fmt(v, digits=1):
    return "-" if v is None else f"{v:.{digits}f}"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=3000)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--cli", help="the cudaops CLI, for top-k's C++ times")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    try:
        import torch
    except ImportError:
        torch = None
    try:
        import cupy
    except ImportError:
        cupy = None
    report = {"torch": [], "cupy": [], "topk": [], "registered": []}
    if torch is not None and torch.cuda.is_available():
        sync = torch.cuda.synchronize
        for op, results, new, out, theirs in torch_cases(torch):
            row = {"op": op, "results": results}
            for key, fn in (("new", new), ("out", out), ("torch", theirs)):
                row[key] = per_call_us(fn, sync, args.calls, args.repeats) if fn else None
            row["new_one"] = one_call_us(new, sync) if new else None
            row["torch_one"] = one_call_us(theirs, sync) if theirs else None
            report["torch"].append(row)
        torch_by_op = {r["op"]: r["torch"] for r in report["torch"]}
        for op, direct, registered in registered_cases(torch):
            report["registered"].append({
                "op": op, "direct": per_call_us(direct, sync, args.calls, args.repeats),
                "registered": per_call_us(registered, sync, args.calls, args.repeats)})
        cpp = cli_topk_us(args.cli) if args.cli else {}
        for shape, (ours, theirs) in topk_streams(torch).items():
            report["topk"].append({"shape": shape, "python": ours, "torch": theirs,
                                   "cpp": cpp.get(shape)})
    else:
        torch_by_op = {}
    if cupy is not None:
        sync = cupy.cuda.runtime.deviceSynchronize
        for op, results, new, out, theirs in cupy_cases(cupy):
            row = {"op": op, "results": results}
            for key, fn in (("new", new), ("out", out), ("cupy", theirs)):
                row[key] = per_call_us(fn, sync, args.calls, args.repeats) if fn else None
            row["torch"] = torch_by_op.get(op)
            report["cupy"].append(row)

    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    print(f"Host cost per call from Python, {ROWS} x {COLS} float32 (streams: median of "
          f"{args.repeats} loops of {args.calls} calls; one call: median of 200)\n")
    if torch is not None:
        print(f"torch {torch.__version__}, DLPack C exchange API: "
              f"{hasattr(torch.Tensor, '__dlpack_c_exchange_api__')}\n")
        print("| op | new results | cudaops (us) | torch (us) | x torch | cudaops out= (us) "
              "| one call: cudaops | one call: torch |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|")
        for r in report["torch"]:
            print(f"| {r['op']} | {r['results']} | {fmt(r['new'])} | {fmt(r['torch'])} | "
                  f"{fmt(ratio(r['new'], r['torch']), 2)} | {fmt(r['out'])} | "
                  f"{fmt(r['new_one'])} | {fmt(r['torch_one'])} |")
        print()
    if cupy is not None:
        print(f"CuPy {cupy.__version__} arrays (yardstick: CuPy's own op, else torch's):\n")
        print("| op | new results | cudaops (us) | CuPy's op (us) | x CuPy | x torch "
              "| cudaops out= (us) |")
        print("|---|---:|---:|---:|---:|---:|---:|")
        for r in report["cupy"]:
            print(f"| {r['op']} | {r['results']} | {fmt(r['new'])} | {fmt(r['cupy'])} | "
                  f"{fmt(ratio(r['new'], r['cupy']), 2)} | {fmt(ratio(r['new'], r['torch']), 2)} "
                  f"| {fmt(r['out'])} |")
        print()
    if report["registered"]:
        print("torch.library ops (cudaops.torch) next to the direct call, torch tensors on "
              "torch's current stream (us per call):\n")
        print("| op | direct | registered | added |")
        print("|---|---:|---:|---:|")
        for r in report["registered"]:
            print(f"| {r['op']} | {fmt(r['direct'])} | {fmt(r['registered'])} | "
                  f"{fmt(r['registered'] - r['direct'])} |")
        print()
    if report["topk"]:
        print("Top-k in runs of 20 calls, float32, CUDA events (us per call):\n")
        print("| shape | k | cudaops from Python | C++ (CLI) | x C++ | torch.topk |")
        print("|---|---:|---:|---:|---:|---:|")
        for r in report["topk"]:
            rows, cols, k = r["shape"]
            print(f"| {rows} x {cols} | {k} | {fmt(r['python'])} | {fmt(r['cpp'])} | "
                  f"{fmt(ratio(r['python'], r['cpp']), 2)} | {fmt(r['torch'])} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
