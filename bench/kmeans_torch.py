"""kmeans: cudaops.kmeans next to a batched torch implementation, in one GPU run.

The torch version is the way retrieval code writes batched k-means: a bmm of the points with the
centroids, argmin (argmax for cosine), and scatter-add of the points into per-cluster sums, from
the same strided initial centroids. Both run 10 iterations; each time is the median of 5
CUDA-event timings of one call after warm-up calls (rowwise_torch.timed). The objective of each
result (sum of squared distances, or of 1 - cosine, computed the same way in float32 for both) is
printed beside it. A second table takes float32 points, whose products cudaops runs exact by
default (three TF32 products) or as TF32 (precision="tf32"), torch as float32 or TF32
(torch.backends.cuda.matmul.allow_tf32), each objective against float64's of the same labels.
Prints Markdown tables.
"""

import torch
from rowwise_torch import timed

import cudaops

SHAPES = [  # (batch, n, d, k, metric)
    (512, 8192, 128, 512, "cosine"),
    (32, 131072, 128, 1024, "l2"),
    (8, 32768, 128, 1024, "l2"),
    (32, 1024, 128, 64, "cosine"),
]
ITERS = 10


def torch_kmeans(x, k, iters, cosine):
    b, n, d = x.shape
    rows = torch.arange(k, device=x.device) * n // k
    pts = torch.nn.functional.normalize(x.float(), dim=-1) if cosine else x.float()
    c = pts[:, rows, :].clone()
    for _ in range(iters):
        scores = torch.bmm(x, c.to(x.dtype).transpose(1, 2)).float()
        if cosine:
            labels = scores.argmax(-1)
        else:
            labels = ((c * c).sum(-1)[:, None, :] - 2 * scores).argmin(-1)
        sums = torch.zeros(b, k, d, device=x.device).scatter_add_(
            1, labels[..., None].expand(-1, -1, d), pts)
        counts = torch.zeros(b, k, device=x.device).scatter_add_(
            1, labels, torch.ones(b, n, device=x.device))
        new = (torch.nn.functional.normalize(sums, dim=-1) if cosine
               else sums / counts.clamp(min=1)[..., None])
        c = torch.where(counts[..., None] > 0, new, c)
    return c, labels


def objective(x, c, labels, cosine):
    picked = torch.gather(c, 1, labels.long()[..., None].expand(-1, -1, x.shape[-1]))
    if cosine:
        return float((1 - torch.nn.functional.cosine_similarity(x.float(), picked, dim=-1)).sum())
    return float(((x.float() - picked) ** 2).sum())


def main():
    print(f"device: {torch.cuda.get_device_name()}, {ITERS} iterations, float16 points\n")
    print("| batch x n x d | k | metric | cudaops (ms) | torch (ms) | speed-up | "
          "objective cudaops / torch - 1 |")
    print("|---|---:|---|---:|---:|---:|---:|")
    for batch, n, d, k, metric in SHAPES:
        cosine = metric == "cosine"
        g = torch.Generator(device="cuda").manual_seed(0)
        centres = torch.randn(batch, k // 2, d, device="cuda", generator=g)
        which = torch.randint(0, k // 2, (batch, n), device="cuda", generator=g)
        x = (torch.gather(centres, 1, which[..., None].expand(-1, -1, d))
             + 0.3 * torch.randn(batch, n, d, device="cuda", generator=g)).half()
        ours = timed(lambda x=x: cudaops.kmeans(x, k, n_iters=ITERS, metric=metric), 5, 1)
        theirs = timed(lambda x=x: torch_kmeans(x, k, ITERS, cosine), 5, 1)
        c1, l1, _ = cudaops.kmeans(x, k, n_iters=ITERS, metric=metric)
        c2, l2 = torch_kmeans(x, k, ITERS, cosine)
        o1, o2 = objective(x, c1, l1, cosine), objective(x, c2, l2, cosine)
        print(f"| {batch} x {n} x {d} | {k} | {metric} | {ours * 1e3:.2f} | {theirs * 1e3:.2f} | "
              f"{theirs / ours:.1f}x | {o1 / o2 - 1:+.2e} |")
        del x, c1, l1, c2, l2
        torch.cuda.empty_cache()
    float32_table()


def float32_table(batch=32, n=131072, d=128, k=1024):
    print(f"\nfloat32 points, {batch} x {n} x {d} into {k} (l2), isotropic Gaussian, {ITERS} "
          "iterations\n")
    print("| products | time (ms) | objective / cudaops exact - 1 |")
    print("|---|---:|---:|")
    g = torch.Generator(device="cuda").manual_seed(1)
    x = torch.randn(batch, n, d, device="cuda", generator=g)
    rows = []
    for precision in ("exact", "tf32"):
        t = timed(lambda: cudaops.kmeans(x, k, n_iters=ITERS, precision=precision), 5, 1)
        c, lab, _ = cudaops.kmeans(x, k, n_iters=ITERS, precision=precision)
        rows.append((f"cudaops {precision}", t, objective(x, c, lab, False)))
    saved = torch.backends.cuda.matmul.allow_tf32
    try:
        for allow in (False, True):
            torch.backends.cuda.matmul.allow_tf32 = allow
            t = timed(lambda: torch_kmeans(x, k, ITERS, False), 5, 1)
            c, lab = torch_kmeans(x, k, ITERS, False)
            rows.append((f"torch {'tf32' if allow else 'float32'}", t, objective(x, c, lab, False)))
    finally:
        torch.backends.cuda.matmul.allow_tf32 = saved
    base = rows[0][2]
    for name, t, o in rows:
        print(f"| {name} | {t * 1e3:.2f} | {o / base - 1:+.2e} |")


if __name__ == "__main__":
    main()
