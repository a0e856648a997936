"""A numpy model of the IVF build's global pass with exact pruning, on the bench's keys.

The build's global pass scores every token of a head against all of the head's centroids (8.8
TFLOP at 32 heads x 131072 tokens into 8192 clusters, about half the build). Since
y . c = y . g + y . (c - g) <= y . g + |y| r for every centroid c of a chunk whose centroids lie
within r of g, a chunk can be skipped for a tile of tokens when, for every token of the tile,
that bound is below a score the token already has (its score against its own segment's
centroid, known before the pass) by a margin wider than the products' rounding: the labels are
those of the full pass. This model measures how many (tile, chunk) products such a pass would
skip on one head of the bench's keys (`dev/harness/ops/ivf.cpp`: 8 directions per head with a
common offset, noise 0.3), clustered as the build clusters them (16 segments of spherical
k-means, 10 iterations, strided init, float32 here):

- the head's centroids grouped by a spherical k-means of the centroids (64 groups), each
  group's centroids cut into chunks of 128 (the last one of a group padded), so that chunks do
  not straddle groups and their radii stay small;
- the tokens ordered by their nearest group, then by their segment's cluster, in tiles of 64.

Prints the fraction of (tile, chunk) pairs skipped and the work left against the full pass
(padded chunks count whole). With --npy, the keys are a head of an array of real keys (the
layout `cudaops ivf build --keys` reads). numpy only; about 15 s on two cores.

    python3 bench/ivf_prune_model.py [--seq 131072] [--groups 64] [--margin 0.01] [--keys gaussian] [--directions 8]
        [--npy keys.npy --head 0]
"""

import argparse
import time

import numpy as np


def draw_keys(rng, seq, dim, kind, directions):
    """One head of the bench's keys (or, kind "gaussian", keys with no structure), centred."""
    if kind == "gaussian":
        x = rng.standard_normal((seq, dim)).astype(np.float32)
        return x - x.mean(0)
    offset = 2.0 + 0.5 * rng.standard_normal(dim)
    dirs = rng.standard_normal((directions, dim))
    which = rng.integers(0, directions, seq)
    x = (offset + dirs[which] + 0.3 * rng.standard_normal((seq, dim))).astype(np.float32)
    return x - x.mean(0)


def spherical_kmeans(x, k, iters):
    """Strided init, assignment by the largest inner product, unit sums; labels of the last."""
    unit = x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-30)
    c = unit[np.arange(k) * (len(x) // k)].copy()
    for _ in range(iters):
        lab = np.argmax(x @ c.T, axis=1)
        sums = np.zeros_like(c)
        np.add.at(sums, lab, unit)
        norm = np.linalg.norm(sums, axis=1)
        c[norm > 0] = sums[norm > 0] / norm[norm > 0, None]
    return c, np.argmax(x @ c.T, axis=1)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seq", type=int, default=131072, help="tokens of the head")
    ap.add_argument("--segments", type=int, default=16)
    ap.add_argument("--per-segment", type=int, default=512, help="clusters per segment")
    ap.add_argument("--groups", type=int, default=64, help="groups of the head's centroids")
    ap.add_argument("--margin", type=float, default=0.01, help="margin, a fraction of |y|")
    ap.add_argument("--keys", choices=["bench", "gaussian"], default="bench")
    ap.add_argument("--npy", help="keys [heads, tokens, dim] or [tokens, dim] from a .npy file")
    ap.add_argument("--head", type=int, default=0, help="the head of --npy's keys")
    ap.add_argument("--directions", type=int, default=8, help="the bench's keys: directions")
    ap.add_argument("--seed", type=int, default=3)
    args = ap.parse_args()
    t0 = time.time()
    rng = np.random.default_rng(args.seed)
    tile, chunk = 64, 128
    if args.npy:
        keys = np.load(args.npy, mmap_mode="r")
        keys = keys[args.head] if keys.ndim == 3 else keys
        x = np.asarray(keys[: args.seq], dtype=np.float32)
        x = x - x.mean(0)
        args.seq = len(x) // args.segments * args.segments
        x = x[: args.seq]
    else:
        x = draw_keys(rng, args.seq, 128, args.keys, args.directions)
    n = args.seq // args.segments
    cents, own = [], np.zeros(args.seq, np.int64)
    for s in range(args.segments):
        c, lab = spherical_kmeans(x[s * n : (s + 1) * n], args.per_segment, 10)
        cents.append(c)
        own[s * n : (s + 1) * n] = s * args.per_segment + lab
    cents = np.concatenate(cents)
    k = len(cents)
    g, group = spherical_kmeans(cents, args.groups, 15)
    chunks = []
    for j in range(args.groups):
        members = np.where(group == j)[0]
        chunks += [members[i : i + chunk] for i in range(0, len(members), chunk)]
    centre = np.stack([cents[ix].mean(0) for ix in chunks])
    radius = np.array(
        [np.linalg.norm(cents[ix] - cents[ix].mean(0), axis=1).max() for ix in chunks]
    )
    order = np.lexsort((own, np.argmax(x @ g.T, axis=1)))
    norms = np.linalg.norm(x, axis=1)
    skipped = total = moved = 0
    for b0 in range(0, args.seq - tile + 1, 8192):
        idx = order[b0 : b0 + 8192]
        y = x[idx]
        have = np.einsum("ij,ij->i", y, cents[own[idx]]) - args.margin * norms[idx]
        bound = y @ centre.T + norms[idx, None] * radius[None, :]
        t = len(idx) // tile
        skip = (bound[: t * tile].reshape(t, tile, -1) < have[: t * tile].reshape(t, tile, 1)).all(
            1
        )
        skipped += int(skip.sum())
        total += skip.size
        moved += int((np.argmax(y @ cents.T, axis=1) != own[idx]).sum())
    left = (1 - skipped / total) * len(chunks) / (k / chunk)
    print(
        f"{args.seq} tokens, {k} centroids in {len(chunks)} chunks (radius mean {radius.mean():.3f})"
    )
    print(
        f"(tile, chunk) pairs skipped: {skipped / total:.3f}; work left: {left:.3f} of the full pass"
    )
    print(f"tokens the global pass moves from their segment's cluster: {moved / args.seq:.3f}")
    print(f"{time.time() - t0:.1f} s")


if __name__ == "__main__":
    main()
