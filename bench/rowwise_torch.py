"""Row-wise ops: cudaops next to torch eager and torch.compile, in one GPU run.

bfloat16 at the standard shapes; every time is the median of 15 CUDA-event timings of 20 calls
back to back after a warm-up, on the same preallocated arrays. Bandwidth counts inputs read once
and outputs written once (the matrices; weights and statistics are included but negligible); the
yardstick is a device-to-device copy of 1 GiB measured in the same run. Prints a Markdown table.
"""

import statistics
import sys

import torch

import cudaops

F = torch.nn.functional
SHAPES = [(32768, 4096), (4096, 32768), (65536, 1024)]
DT = torch.bfloat16


def timed(fn, reps=15, inner=20):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(inner):
            fn()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop) / inner * 1e-3)
    return statistics.median(times)


def copy_bandwidth():
    n = 1 << 29  # 1 GiB of bf16
    a = torch.empty(n, dtype=DT, device="cuda")
    b = torch.empty_like(a)
    return 2 * a.numel() * 2 / timed(lambda: b.copy_(a), reps=10, inner=5)


def rms_eager(x, w, eps=1e-6):
    return F.rms_norm(x, (x.shape[-1],), w, eps)


def rms_backward_eager(dy, x, w, rstd):
    xh = x.float() * rstd[:, None]
    g = dy.float() * w.float()
    dx = rstd[:, None] * (g - xh * (g * xh).mean(-1, keepdim=True))
    return dx.to(x.dtype), (dy.float() * xh).sum(0).to(x.dtype)


def softmax_backward_eager(y, dy):
    return torch._softmax_backward_data(dy, y, -1, y.dtype)


def softmax_backward_formula(y, dy):
    yf, dyf = y.float(), dy.float()
    return (yf * (dyf - (dyf * yf).sum(-1, keepdim=True))).to(y.dtype)


def ln_backward_eager(dy, x, w, b, mean, rstd):
    return torch.ops.aten.native_layer_norm_backward(dy, x, [x.shape[-1]], mean[:, None],
                                                     rstd[:, None], w, b, [True, True, True])


def ln_backward_formula(dy, x, w, mean, rstd):
    xh = (x.float() - mean[:, None]) * rstd[:, None]
    g = dy.float() * w.float()
    dx = rstd[:, None] * (g - g.mean(-1, keepdim=True) - xh * (g * xh).mean(-1, keepdim=True))
    return dx.to(x.dtype), (dy.float() * xh).sum(0).to(x.dtype), dy.float().sum(0).to(x.dtype)


def fused_eager(x, r, w):
    r.add_(x)
    x.copy_(F.rms_norm(r, (r.shape[-1],), w, 1e-6))


def fused_formula(x, r, w):
    s = (x.float() + r.float()).to(x.dtype)
    sf = s.float()
    y = sf * torch.rsqrt((sf * sf).mean(-1, keepdim=True) + 1e-6) * w.float()
    return s, y.to(x.dtype)


def main():
    compile_ok = True
    try:
        compiled = {name: torch.compile(fn, dynamic=False) for name, fn in [
            ("softmax", lambda x: torch.softmax(x, -1)),
            ("softmax_backward", softmax_backward_formula),
            ("layer_norm", lambda x, w, b: F.layer_norm(x, (x.shape[-1],), w, b, 1e-5)),
            ("layer_norm_backward", ln_backward_formula),
            ("rms_norm", rms_eager),
            ("rms_norm_backward", rms_backward_eager),
            ("fused_add_rms_norm", fused_formula)]}
    except Exception as e:
        print(f"torch.compile unavailable: {e}", file=sys.stderr)
        compile_ok = False
    copy = copy_bandwidth()
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}, bfloat16; "
          f"copy {copy / 1e12:.3f} TB/s\n")
    print("| op | shape | cudaops TB/s | of copy | torch eager TB/s | torch.compile TB/s |")
    print("|---|---|---:|---:|---:|---:|")
    for rows, cols in SHAPES:
        x, dy, r = [torch.randn(rows, cols, device="cuda", dtype=DT) for _ in range(3)]
        w, b = torch.randn(cols, device="cuda", dtype=DT), torch.randn(cols, device="cuda", dtype=DT)
        y = torch.empty_like(x)
        m = rows * cols * 2
        y_sm = torch.softmax(x, -1)
        _, mean, rstd = cudaops.layer_norm(x, w, b, return_stats=True)
        _, rrstd = cudaops.rms_norm(x, w, return_rstd=True)
        cases = [
            ("softmax", 2 * m, lambda: cudaops.softmax(x, out=y),
             lambda: torch.softmax(x, -1), lambda: compiled["softmax"](x)),
            ("softmax_backward", 3 * m, lambda: cudaops.softmax_backward(y_sm, dy, out=y),
             lambda: softmax_backward_eager(y_sm, dy),
             lambda: compiled["softmax_backward"](y_sm, dy)),
            ("layer_norm", 2 * m, lambda: cudaops.layer_norm(x, w, b, out=y),
             lambda: F.layer_norm(x, (cols,), w, b, 1e-5),
             lambda: compiled["layer_norm"](x, w, b)),
            ("layer_norm_backward", 3 * m,
             lambda: cudaops.layer_norm_backward(dy, x, w, mean, rstd),
             lambda: ln_backward_eager(dy, x, w, b, mean, rstd),
             lambda: compiled["layer_norm_backward"](dy, x, w, mean, rstd)),
            ("rms_norm", 2 * m, lambda: cudaops.rms_norm(x, w, out=y),
             lambda: rms_eager(x, w), lambda: compiled["rms_norm"](x, w)),
            ("rms_norm_backward", 3 * m, lambda: cudaops.rms_norm_backward(dy, x, w, rrstd),
             lambda: rms_backward_eager(dy, x, w, rrstd),
             lambda: compiled["rms_norm_backward"](dy, x, w, rrstd)),
            ("fused_add_rms_norm", 4 * m, lambda: cudaops.fused_add_rms_norm(y, r, w),
             lambda: fused_eager(y, r, w), lambda: compiled["fused_add_rms_norm"](y, r, w)),
        ]
        for name, nbytes, ours, eager, comp in cases:
            t_ours = timed(ours)
            t_eager = timed(eager)
            t_comp = timed(comp) if compile_ok else float("nan")
            print(f"| {name} | {rows}x{cols} | {nbytes / t_ours / 1e12:.3f} | "
                  f"{100 * nbytes / t_ours / copy:.1f}% | {nbytes / t_eager / 1e12:.3f} | "
                  f"{nbytes / t_comp / 1e12:.3f} |", flush=True)
            if name == "fused_add_rms_norm":
                r.copy_(dy)  # keep the residual finite after the repeated in-place calls
        x = dy = r = y = y_sm = None  # frees this shape's arrays before the next
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
