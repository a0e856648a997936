"""Context parallel decode: each rank's zones from its own ranking, or from one global ranking?

    python bench/context_parallel_ranking.py [--tokens 16384] [--ranks 1 2 4] [--models llm gaussian]

An accuracy study on the CPU (numpy, float64 arithmetic; no GPU): what the zones are chosen from
decides the error of the merged decode step, and the device time of either choice is the same
attention over the same number of clusters. The context of S tokens is cut into R contiguous
parts; each rank builds its part's index as the library does (keys centred by the part's mean,
spherical k-means, 16 tokens a cluster, strided start, 10 iterations) and attends with an exact
zone of 1.8% of the clusters and an estimated zone of the next 23.2% (each cluster by its mean key
and value sum, as ivf_attention does); the ranks' partial outputs merge exactly by their
log-sum-exps. The zones, of the same total size in every scheme:

- local:        each rank its own 1.8% / 23.2% by its index's ranking (q . unit centroid, per
                query head), what cudaops.torch.context_parallel_attention does;
- local mass:   each rank its own share, ranked by the cluster's softmax mass estimate
                (log n_c + q . kbar_c / sqrt(D));
- global mass:  one ranking of every rank's clusters by that estimate (an all_gather of a score
                per cluster), each rank attending to the clusters of its part that made it.

Prints the median over query heads and queries of the relative L2 error of the output against
exact attention over every token, per key model and rank count (R = 1: one index, the three
schemes differ only by the ranking).
"""

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import key_models

PROBE, ESTIMATE, PER_CLUSTER, ITERS = 0.018, 0.232, 16, 10


def spherical_kmeans(y, k, iters=ITERS):
    """Labels [n] and unit centroids [k, D] of y [n, D] (strided start, empty clusters kept)."""
    n = y.shape[0]
    norms = np.linalg.norm(y, axis=1, keepdims=True)
    z = y / np.maximum(norms, 1e-30)
    c = z[(np.arange(k) * n) // k].copy()
    for _ in range(iters + 1):
        labels = np.argmax(z @ c.T, axis=1)
        sums = np.zeros_like(c)
        np.add.at(sums, labels, z)
        lengths = np.linalg.norm(sums, axis=1, keepdims=True)
        c = np.where(lengths > 0, sums / np.maximum(lengths, 1e-30), c)
    return labels, c


class Part:
    """One rank's index over keys [S_r, D] and values [S_r, Dv] of one kv head."""

    def __init__(self, keys, values):
        self.keys, self.values = keys, values
        self.mean = keys.mean(axis=0)
        k = max(1, keys.shape[0] // PER_CLUSTER)
        self.labels, self.unit = spherical_kmeans(keys - self.mean, k)
        self.k = k
        self.sizes = np.bincount(self.labels, minlength=k)
        sums = np.zeros((k, keys.shape[1]))
        np.add.at(sums, self.labels, keys)
        self.kbar = sums / np.maximum(self.sizes, 1)[:, None]  # mean keys, original coordinates
        self.vsum = np.zeros((k, values.shape[1]))
        np.add.at(self.vsum, self.labels, values)

    def scores(self, q, scale, by):
        """A score per cluster for query q: the index's ranking or the mass estimate."""
        if by == "index":
            s = self.unit @ q
        else:
            s = np.log(np.maximum(self.sizes, 1)) + scale * (self.kbar @ q)
        return np.where(self.sizes > 0, s, -np.inf)

    def attend(self, q, scale, exact, estimated):
        """(out, lse) of q over the exact clusters' tokens and the estimated clusters."""
        tok = np.isin(self.labels, exact)
        logits = [scale * (self.keys[tok] @ q)]
        vals = [self.values[tok]]
        counts = [np.ones(int(tok.sum()))]
        est = np.asarray(estimated, dtype=np.int64)
        est = est[self.sizes[est] > 0]
        logits.append(scale * (self.kbar[est] @ q))
        vals.append(self.vsum[est] / self.sizes[est][:, None])
        counts.append(self.sizes[est].astype(np.float64))
        s, v, n = np.concatenate(logits), np.concatenate(vals), np.concatenate(counts)
        if s.size == 0:
            return np.zeros(self.values.shape[1]), -np.inf
        m = s.max()
        w = n * np.exp(s - m)
        return (w @ v) / w.sum(), m + np.log(w.sum())


def merge(parts):
    lses = np.array([lse for _, lse in parts])
    m = lses.max()
    w = np.exp(lses - m)
    return sum(wi * o for wi, (o, _) in zip(w, parts)) / w.sum()


def zones(order, n_exact, n_wide):
    return order[:n_exact], order[n_exact:n_wide]


def step(parts, q, scale, scheme):
    """The merged output of q over the parts, zones chosen by `scheme`."""
    total = sum(p.k for p in parts)
    if scheme == "global mass":
        scores = [p.scores(q, scale, "mass") for p in parts]
        flat = np.concatenate(scores)
        order = np.argsort(-flat, kind="stable")
        n_exact = max(1, round(PROBE * total))
        n_wide = n_exact + round(ESTIMATE * total)
        rank = np.empty(total, dtype=np.int64)
        rank[order] = np.arange(total)
        out, at = [], 0
        for p, s in zip(parts, scores):
            r = rank[at:at + p.k]
            ids = np.arange(p.k)
            finite = np.isfinite(s)
            out.append(p.attend(q, scale, ids[(r < n_exact) & finite],
                                ids[(r >= n_exact) & (r < n_wide) & finite]))
            at += p.k
        return merge(out)
    by = "index" if scheme == "local" else "mass"
    out = []
    for p in parts:
        s = p.scores(q, scale, by)
        order = np.argsort(-s, kind="stable")
        order = order[np.isfinite(s[order])]
        n_exact = max(1, round(PROBE * p.k))
        out.append(p.attend(q, scale, *zones(order, n_exact, n_exact + round(ESTIMATE * p.k))))
    return merge(out)


def run(model, tokens, ranks, heads, q_per_head, n_queries, dim, seed):
    k, v, q = key_models.draw(model, heads, tokens, dim, heads * q_per_head, n_queries, seed)
    k, v, q = k.astype(np.float64), v.astype(np.float64), q.astype(np.float64)
    scale = dim ** -0.5
    schemes = ("local", "local mass", "global mass")
    errors = {s: [] for s in schemes}
    for h in range(heads):
        bounds = [tokens * r // ranks for r in range(ranks + 1)]
        parts = [Part(k[h, a:b], v[h, a:b]) for a, b in zip(bounds, bounds[1:])]
        for g in range(h * q_per_head, (h + 1) * q_per_head):
            for i in range(n_queries):
                qq = q[g, i]
                logits = scale * (k[h] @ qq)
                p = np.exp(logits - logits.max())
                want = (p @ v[h]) / p.sum()
                for s in schemes:
                    got = step(parts, qq, scale, s)
                    errors[s].append(np.linalg.norm(got - want) / np.linalg.norm(want))
    return {s: float(np.median(e)) for s, e in errors.items()}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tokens", type=int, default=16384)
    parser.add_argument("--ranks", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--models", nargs="+", default=["llm", "gaussian"])
    parser.add_argument("--heads", type=int, default=2)
    parser.add_argument("--q-per-head", type=int, default=4)
    parser.add_argument("--queries", type=int, default=4)
    parser.add_argument("--dim", type=int, default=128)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    print(f"{args.tokens} tokens, {args.heads} kv heads x {args.q_per_head} query heads x "
          f"{args.queries} queries, D = {args.dim}; exact zone {PROBE:.1%}, estimated "
          f"{ESTIMATE:.1%} of the clusters; median relative L2 error against exact attention\n")
    print("| keys | ranks | local (the index's ranking) | local, by mass | global, by mass |")
    print("|---|---:|---:|---:|---:|")
    for model in args.models:
        for ranks in args.ranks:
            e = run(model, args.tokens, ranks, args.heads, args.q_per_head, args.queries,
                    args.dim, args.seed)
            print(f"| {model} | {ranks} | {e['local']:.4f} | {e['local mass']:.4f} | "
                  f"{e['global mass']:.4f} |", flush=True)


if __name__ == "__main__":
    main()
