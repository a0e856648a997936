"""ivf: cudaops.ivf next to torch, in one GPU run.

Build: cudaops.ivf.build_global beside a torch implementation of the same schedule (each head's
keys centred by its mean, segments clustered by batched spherical k-means from strided centroids,
the global pass in chunks of tokens, each head's tokens grouped by cluster with a stable argsort,
keys and values gathered in that order). Search: Index.search beside exact search in torch (a
bmm of the queries with every key of their head, then topk), with recall@k of the index against
that exact search at several n_probe; and the retrieval (clusters by the group's softmax, their
tokens gathered into blocks) at the search's shape. Times are medians of CUDA-event timings after
warm-up calls (rowwise_torch.timed). Keys are a mixture of directions per head with a large common
offset, as attention keys are; queries lie near keys. Prints Markdown tables.
"""

import torch
from kmeans_torch import torch_kmeans
from rowwise_torch import timed

import cudaops

BUILD = (32, 131072, 128, 8192, 16)  # heads, tokens, dim, clusters, segments
SEARCH = (8, 32, 131072, 128, 8192, 16, 1024)  # kv heads, q heads, tokens, dim, clusters, seg, k
PROBES = [37, 147, 588]
# heads, tokens, dim, clusters, segments, new tokens, new clusters
EXTEND = (32, 8192, 128, 512, 8, 1024, 64)
ITERS = 10


def keys_like_attention(heads, tokens, dim, seed):
    g = torch.Generator(device="cuda").manual_seed(seed)
    offset = 2.0 + 0.5 * torch.randn(heads, 1, dim, device="cuda", generator=g)
    dirs = torch.randn(heads, 64, dim, device="cuda", generator=g)
    which = torch.randint(0, 64, (heads, tokens), device="cuda", generator=g)
    x = offset + torch.gather(dirs, 1, which[..., None].expand(-1, -1, dim))
    return (x + 0.3 * torch.randn(heads, tokens, dim, device="cuda", generator=g)).half()


def torch_build(keys, values, clusters, segments, iters):
    h, s, d = keys.shape
    mean = keys.float().mean(1, keepdim=True)
    centred = (keys.float() - mean).half()
    per = clusters // segments
    c, _ = torch_kmeans(centred.reshape(h * segments, s // segments, d), per, iters, True)
    c = c.reshape(h, clusters, d)
    labels = torch.empty(h, s, dtype=torch.int64, device=keys.device)
    for t in range(0, s, 16384):  # the global pass, in chunks of tokens
        labels[:, t:t + 16384] = torch.bmm(centred[:, t:t + 16384], c.half().transpose(1, 2)).argmax(-1)
    order = torch.argsort(labels, dim=1, stable=True)
    sizes = torch.zeros(h, clusters, dtype=torch.int64, device=keys.device).scatter_add_(
        1, labels, torch.ones_like(labels))
    offsets = torch.nn.functional.pad(sizes.cumsum(1), (1, 0))
    gathered_keys = torch.gather(keys, 1, order[..., None].expand(-1, -1, d))
    gathered_values = torch.gather(values, 1, order[..., None].expand(-1, -1, values.shape[-1]))
    return mean, c, offsets, order, gathered_keys, gathered_values


def torch_exact(queries, keys, k):
    group = queries.shape[0] // keys.shape[0]
    kv = keys.repeat_interleave(group, dim=0)
    return torch.bmm(queries, kv.transpose(1, 2)).float().topk(k, dim=-1)


def main():
    print(f"device: {torch.cuda.get_device_name()}, float16 keys and values\n")
    h, s, d, clusters, segments = BUILD
    keys = keys_like_attention(h, s, d, 0)
    values = torch.randn(h, s, d, dtype=torch.float16, device="cuda")
    ours = timed(lambda: cudaops.ivf.build_global(keys, values, clusters, segments, ITERS), 5, 1)
    theirs = timed(lambda: torch_build(keys, values, clusters, segments, ITERS), 3, 1)
    index = cudaops.ivf.build_global(keys, values, clusters, segments, ITERS)
    print("| build: heads x tokens x dim | clusters | segments | cudaops (ms) | torch (ms) | "
          "speed-up | bytes per token |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    print(f"| {h} x {s} x {d} | {clusters} | {segments} | {ours * 1e3:.2f} | "
          f"{theirs * 1e3:.2f} | {theirs / ours:.1f}x | {index.nbytes / (h * s):.1f} |\n")
    del keys, values, index
    torch.cuda.empty_cache()

    kv, qh, s, d, clusters, segments, k = SEARCH
    keys = keys_like_attention(kv, s, d, 1)
    values = torch.randn(kv, s, d, dtype=torch.float16, device="cuda")
    index = cudaops.ivf.build_global(keys, values, clusters, segments, ITERS)
    g = torch.Generator(device="cuda").manual_seed(2)
    picks = torch.randint(0, s, (qh,), device="cuda", generator=g)
    queries = (keys[torch.arange(qh, device="cuda") // (qh // kv), picks][:, None, :].float() +
               0.3 * torch.randn(qh, 1, d, device="cuda", generator=g)).half()
    exact_time = timed(lambda: torch_exact(queries, keys, k), 10, 5)
    exact_ids = torch_exact(queries, keys, k).indices
    print(f"| search: kv heads, q heads, tokens, dim | clusters | k | n_probe | cudaops (us) | "
          f"torch exact (us) | speed-up | recall@{k} |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for n_probe in PROBES:
        t = timed(lambda n_probe=n_probe: index.search(queries, k, n_probe), 10, 5)
        _, ids = index.search(queries, k, n_probe)
        hits = sum(len(set(a.tolist()) & set(b.tolist()))
                   for a, b in zip(ids.reshape(qh, k), exact_ids.reshape(qh, k)))
        print(f"| {kv}, {qh}, {s}, {d} | {clusters} | {k} | {n_probe} | {t * 1e6:.1f} | "
              f"{exact_time * 1e6:.1f} | {exact_time / t:.1f}x | {hits / (qh * k):.3f} |")
    print("\n| retrieve: kv heads, q heads, tokens, dim | clusters | n_probe | tokens per block "
          "(largest) | mean length | cudaops (us) | gathered GB/s |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for n_probe in PROBES:
        t = timed(lambda n_probe=n_probe: index.retrieve(queries, n_probe), 10, 5)
        k_out, v_out, _, lengths = index.retrieve(queries, n_probe)
        moved = (k_out.numel() + v_out.numel()) * 2 * 2  # the blocks read and written
        print(f"| {kv}, {qh}, {s}, {d} | {clusters} | {n_probe} | {k_out.shape[2]} | "
              f"{lengths.double().mean().item():.0f} | {t * 1e6:.1f} | {moved / t / 1e9:.0f} |")

    del keys, values, index
    torch.cuda.empty_cache()

    h, s, d, clusters, segments, t, c = EXTEND
    calls = 3 + 5 * 4  # timed()'s warm-up and timed calls, each appending a segment
    keys = keys_like_attention(h, s + calls * t, d, 3)
    values = torch.randn(h, s + calls * t, d, dtype=torch.float16, device="cuda")
    index = cudaops.ivf.build_global(keys[:, :s].contiguous(), values[:, :s].contiguous(),
                                     clusters, segments, ITERS, capacity=s + calls * t,
                                     max_clusters=clusters + calls * c)
    chunks = [(keys[:, s + i * t:s + (i + 1) * t].contiguous(),
               values[:, s + i * t:s + (i + 1) * t].contiguous()) for i in range(calls)]
    it = iter(chunks)

    def extend():
        k_new, v_new = next(it)
        index.extend(k_new, v_new, c, ITERS)

    per_call = timed(extend, 5, 4)
    print("\n| extend: heads x new tokens x dim | new clusters | iterations | "
          "cudaops (us per call) |")
    print("|---|---:|---:|---:|")
    print(f"| {h} x {t} x {d} | {c} | {ITERS} | {per_call * 1e6:.1f} |")
    assert index.size == s + calls * t


if __name__ == "__main__":
    main()
