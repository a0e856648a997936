"""The decode step over the index beside dense attention and a torch RetroInfer, on key models.

    python bench/decode_attention.py [--models llm gaussian] [--tokens 131072 1048576] [--json F]

For each key model (bench/key_models.py) and context length: 8 kv heads, 32 query heads, D = 128,
float16; tokens / 16 clusters in 16 segments; the exact zone 1.8% of the clusters, the estimated
zone the next 23.2% (RetroInfer's defaults), 68 extra tokens (4 sinks and the 64 most recent,
not indexed), one query per head. Times (CUDA events, median of 50 after warm-up, each call on the
current stream) of:
  - ours:     index.attention (ranking, both zones and the extras, one call);
  - dense:    torch scaled_dot_product_attention over every token (enable_gqa), each backend torch
              offers tried and the fastest reported by name;
  - anchor:   RetroInfer's decode math in torch, written from the paper (cluster scores, the
              zones' tokens gathered, the estimate from each cluster's mean key and value sum,
              one softmax over both), on the same index and zones.
Accuracy against exact attention over every token (float64), the median over query heads of the
relative L2 error of the output: the exact zone alone, exact zone + estimate, the anchor, and the
oracle (exact attention over the true top 1.8% of tokens by score, plus the extras); and how
much of the softmax mass the exact zone's tokens hold.
"""

import argparse
import json
import math
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import key_models

import cudaops

HEADS, Q_HEADS, DIM, SEGMENTS = 8, 32, 128, 16
SINKS, RECENT = 4, 64
PROBE_FRACTION, ESTIMATE_FRACTION, ORACLE_FRACTION = 0.018, 0.232, 0.018


class _View:
    """A CUDA array interface over memory another object keeps alive."""

    def __init__(self, owner, address, shape, typestr):
        self.owner = owner
        self.__cuda_array_interface__ = {"shape": tuple(shape), "typestr": typestr,
                                         "data": (address, False), "version": 3, "strides": None}


def index_tensors(index):
    """The index's arrays as torch tensors in place (16-bit ones reinterpreted as float16)."""
    out = {}
    for name, (address, shape, typestr) in index._arrays().items():
        t = torch.as_tensor(_View(index, address, shape, typestr), device="cuda")
        out[name] = t.view(torch.float16) if typestr == "<u2" else t
    return out


def timed(fn, iters=50, warmup=10):
    for _ in range(warmup):
        fn()
    start = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    end = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    for i in range(iters):
        start[i].record()
        fn()
        end[i].record()
    torch.cuda.synchronize()
    return float(np.median([s.elapsed_time(e) for s, e in zip(start, end)])) * 1000.0  # us


def dense_backends(q, k, v):
    """{backend: us} of SDPA over every token, each backend torch lets run here."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    times = {}
    names = ("FLASH_ATTENTION", "EFFICIENT_ATTENTION", "CUDNN_ATTENTION", "MATH")
    for backend in (getattr(SDPBackend, n) for n in names if hasattr(SDPBackend, n)):
        try:
            with sdpa_kernel(backend):
                F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
                torch.cuda.synchronize()
                times[backend.name] = timed(
                    lambda: F.scaled_dot_product_attention(q, k, v, enable_gqa=True), iters=20)
        except (RuntimeError, ValueError):
            continue
    return times


def anchor(index, t, queries, n_probe, n_estimate, extra_k, extra_v, scale):
    """RetroInfer's decode step in torch, written from the paper, on the same index: its four
    stages (cluster scores and the top clusters: index.clusters; the exact zone's tokens gathered:
    index.retrieve; each estimated cluster's mean key, size and value sum gathered; one
    "weighted flash decoding" softmax over the exact tokens, the extras and the estimated
    clusters, each cluster weighted by its size). queries [Hq, 1, D]; out [Hq, 1, Dv] float32."""
    heads, cm = t["sizes"].shape
    group = queries.shape[0] // heads
    keys_b, values_b, _, lengths = index.retrieve(queries, n_probe)  # [H, 1, M, D]
    exact = index.clusters(queries, n_probe)[:, 0].long()  # [H, n_probe]
    wide = index.clusters(queries, n_probe + n_estimate)[:, 0].long()  # [H, W]
    in_exact = torch.zeros(heads, cm + 1, dtype=torch.bool, device="cuda")
    in_exact.scatter_(1, torch.where(exact >= 0, exact, cm), True)
    w = wide.clamp(min=0)
    est = (wide >= 0) & ~torch.gather(in_exact, 1, w)
    hh = torch.arange(heads, device="cuda")[:, None]
    sizes = t["sizes"][hh, w].float()
    est &= sizes > 0
    km = t["key_means"][hh, w].float()  # [H, W, D]
    vs = t["value_sums"][hh, w].float()  # [H, W, Dv]
    q = queries[:, 0].float().view(heads, group, -1)  # [H, G, D]
    m_len = keys_b.shape[2]
    s_exact = scale * torch.einsum("hgd,hmd->hgm", q, keys_b[:, 0].float())
    s_exact = s_exact.masked_fill(torch.arange(m_len, device="cuda") >= lengths[:, 0, None, None],
                                  -math.inf)
    s_extra = scale * torch.einsum("hgd,hxd->hgx", q, extra_k.float())
    s_est = (scale * torch.einsum("hgd,hwd->hgw", q, km)).masked_fill(~est[:, None, :], -math.inf)
    m = torch.maximum(torch.maximum(s_exact.amax(-1), s_extra.amax(-1)), s_est.amax(-1))[..., None]
    p_exact, p_extra, p_est = (torch.exp(x - m) for x in (s_exact, s_extra, s_est))
    num = (torch.einsum("hgm,hmd->hgd", p_exact, values_b[:, 0].float()) +
           torch.einsum("hgx,hxd->hgd", p_extra, extra_v.float()) +
           torch.einsum("hgw,hwd->hgd", p_est, vs))
    den = p_exact.sum(-1) + p_extra.sum(-1) + (p_est * sizes[:, None, :]).sum(-1)
    return (num / den[..., None]).reshape(heads * group, 1, -1)


def rel_err(got, want):
    return (got.double() - want).norm(dim=-1) / want.norm(dim=-1)


def run(model, tokens, seed=0):
    clusters = tokens // 16
    n_probe = max(1, round(PROBE_FRACTION * clusters))
    n_estimate = round(ESTIMATE_FRACTION * clusters)
    k, v, q = key_models.draw(model, HEADS, tokens + SINKS + RECENT, DIM, Q_HEADS, 1, seed)
    keys = torch.from_numpy(k).to("cuda", torch.float16)
    values = torch.from_numpy(v).to("cuda", torch.float16)
    queries = torch.from_numpy(q).to("cuda", torch.float16)
    del k, v
    indexed_k = keys[:, SINKS:SINKS + tokens].contiguous()
    indexed_v = values[:, SINKS:SINKS + tokens].contiguous()
    extra_k = torch.cat([keys[:, :SINKS], keys[:, SINKS + tokens:]], 1).contiguous()
    extra_v = torch.cat([values[:, :SINKS], values[:, SINKS + tokens:]], 1).contiguous()
    index = cudaops.ivf.build_global(indexed_k, indexed_v, clusters, SEGMENTS)
    scale = DIM ** -0.5
    stream = torch.cuda.current_stream()

    def ours(n_est=n_estimate):
        return index.attention(queries, n_probe, n_est, extra_keys=extra_k,
                               extra_values=extra_v, stream=stream)

    o = ours()
    o_exact = ours(0)
    t_ours = timed(ours)
    # Dense: every token, [1, H, S, D] (queries [1, Hq, 1, D]).
    qd, kd, vd = queries.unsqueeze(0), keys.unsqueeze(0), values.unsqueeze(0)
    dense = dense_backends(qd, kd, vd)
    # Exact attention in float64 per head, and the oracle's top tokens.
    group = Q_HEADS // HEADS
    want, mass, oracle_err = [], [], []
    t = index_tensors(index)
    exact = index.clusters(queries, n_probe)
    top = max(1, round(ORACLE_FRACTION * tokens))
    for g in range(Q_HEADS):
        h = g // group
        logits = scale * (keys[h].double() @ queries[g, 0].double())
        p = torch.softmax(logits, 0)
        want.append(p @ values[h].double())
        # The exact zone's tokens: their share of the mass.
        off = t["offsets"][h]
        ex = exact[h, 0][exact[h, 0] >= 0].long()
        ids = torch.cat([t["ids"][h][int(off[c]):int(off[c + 1])].long() for c in ex]) + SINKS
        mass.append(float(p[ids].sum() + p[:SINKS].sum() + p[SINKS + tokens:].sum()))
        # The oracle: the true top tokens of the indexed ones, plus the extras.
        inner = logits[SINKS:SINKS + tokens]
        chosen = torch.cat([torch.topk(inner, top).indices + SINKS,
                            torch.arange(SINKS, device="cuda"),
                            torch.arange(SINKS + tokens, SINKS + tokens + RECENT, device="cuda")])
        po = torch.softmax(logits[chosen], 0)
        oracle = po @ values[h].double()[chosen]
        oracle_err.append(float((oracle - want[-1]).norm() / want[-1].norm()))
    want = torch.stack(want).unsqueeze(1)
    def anchor_step():
        return anchor(index, t, queries, n_probe, n_estimate, extra_k, extra_v, scale)

    a = anchor_step()
    t_anchor = timed(anchor_step, iters=20, warmup=3)
    best = min(dense, key=dense.get) if dense else None
    row = {
        "model": model, "tokens": tokens, "clusters": clusters, "n_probe": n_probe,
        "n_estimate": n_estimate, "extra": SINKS + RECENT,
        "ours_us": t_ours, "dense_us": dense.get(best), "dense_backend": best,
        "dense_all_us": dense, "speedup": dense.get(best, math.nan) / t_ours,
        "anchor_us": t_anchor,
        "err_exact_zone": float(rel_err(o_exact, want).median()),
        "err_with_estimate": float(rel_err(o, want).median()),
        "err_anchor": float(rel_err(a.to(torch.float16), want).median()),
        "err_oracle": float(np.median(oracle_err)),
        "ours_vs_anchor": float(rel_err(o, a.double()).max()),
        "exact_zone_mass": float(np.median(mass)),
        "device": torch.cuda.get_device_name(),
    }
    print(json.dumps(row), flush=True)
    return row


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", nargs="+", default=["llm", "gaussian"])
    parser.add_argument("--tokens", nargs="+", type=int, default=[131072])
    parser.add_argument("--json", help="write the rows here")
    parser.add_argument("--markdown", help="write a table here (scripts/results_table.py --extra)")
    args = parser.parse_args()
    rows = [run(m, n) for n in args.tokens for m in args.models]
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(markdown(rows))


def markdown(rows):
    """The rows as the results' table: times, the speedup over dense, and the errors."""
    out = ["### Decode attention over the index (`bench/decode_attention.py`)", "",
           "8 kv heads, 32 query heads, D = 128, float16, one query a head, 68 extra tokens; "
           "tokens / 16 clusters; exact zone 1.8% of the clusters, estimated zone the next 23.2%. "
           "Times: CUDA events, median of 50, from Python. Errors: median over query heads of the "
           "relative L2 error against exact attention over every token (float64).", "",
           "| keys | tokens | ours (us) | dense SDPA (us, backend) | speedup | torch RetroInfer "
           "(us) | error: exact zone | + estimate | oracle top 1.8% | ours vs torch RetroInfer "
           "| exact zone's softmax mass |",
           "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        out.append(f"| {r['model']} | {r['tokens']} | {r['ours_us']:.1f} | "
                   f"{r['dense_us']:.1f} ({r['dense_backend']}) | {r['speedup']:.1f}x | "
                   f"{r['anchor_us']:.0f} | {r['err_exact_zone']:.4f} | "
                   f"{r['err_with_estimate']:.4f} | {r['err_oracle']:.4f} | "
                   f"{r['ours_vs_anchor']:.1e} | {r['exact_zone_mass']:.3f} |")
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    main()
