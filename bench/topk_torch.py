"""topk: cudaops next to torch.topk, in one GPU run.

float32 at the issue's shapes (and float16/bfloat16 at one); each time is the median of 15
CUDA-event timings of 20 calls back to back after a warm-up. The calls cycle through copies of
the input that together exceed twice the L2 cache, so each call reads its input from DRAM. The
yardstick is the time to read the input once at the device-to-device copy bandwidth measured in
the same run. Prints a Markdown table.
"""

import statistics

import torch

import cudaops

SHAPES = [  # (rows, cols, k, dtype)
    (64, 65536, 64, torch.float32),
    (64, 65536, 1024, torch.float32),
    (1024, 4096, 32, torch.float32),
    (1, 1 << 24, 1024, torch.float32),
    (4096, 32768, 2048, torch.float32),
    (64, 65536, 1024, torch.bfloat16),
    (64, 131072, 4096, torch.float32),
]


def timed(fn, reps=15, inner=20):
    for i in range(3):
        fn(i)
    torch.cuda.synchronize()
    times = []
    for r in range(reps):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for i in range(inner):
            fn(r * inner + i)
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop) / inner * 1e-3)
    return statistics.median(times)


def copy_bandwidth():
    a = torch.empty(1 << 28, dtype=torch.float32, device="cuda")
    b = torch.empty_like(a)
    return 2 * a.numel() * 4 / timed(lambda i: b.copy_(a), reps=10, inner=5)


def main():
    props = torch.cuda.get_device_properties(0)
    l2 = getattr(props, "L2_cache_size", 50 << 20)
    copy = copy_bandwidth()
    print(f"device: {props.name}; copy bandwidth {copy / 1e9:.0f} GB/s\n")
    print("| shape | k | dtype | read once (us) | cudaops (us) | torch.topk (us) | speed-up |")
    print("|---|---|---|---|---|---|---|")
    for rows, cols, k, dtype in SHAPES:
        nbytes = rows * cols * torch.finfo(dtype).bits // 8
        copies = max(1, (2 * l2) // nbytes + 1)
        xs = [torch.randn(rows, cols, device="cuda").to(dtype) for _ in range(copies)]
        ours = timed(lambda i: cudaops.topk(xs[i % copies], k))
        theirs = timed(lambda i: torch.topk(xs[i % copies], k))
        # The same values (ties may be ordered differently by torch).
        v, _ = cudaops.topk(xs[0], k)
        tv, _ = torch.topk(xs[0], k)
        assert torch.equal(v, tv), (rows, cols, k)
        once = nbytes / (copy / 2)
        name = str(dtype).replace("torch.", "")
        print(f"| {rows} x {cols} | {k} | {name} | {once * 1e6:.1f} | {ours * 1e6:.1f} | "
              f"{theirs * 1e6:.1f} | {theirs / ours:.1f}x |")
        xs = None  # frees this shape's copies before the next


if __name__ == "__main__":
    main()
