"""A decoding loop over an IVF index of a torch model's KV cache, with cudaops.

    python examples/python/decode_loop.py

A model's cache is [batch, seq, kv_heads, dim]; the index takes [kv_heads, tokens, dim]. Each
step attends every query head exactly to its best clusters and to the recent tokens not yet
indexed, and estimates the next clusters; every 1024 tokens the recent ones are appended to the
index (Index.extend, within the room reserved at build time). Then the index is saved and
loaded. Needs a GPU and torch.
"""

import torch

import cudaops

kv_heads, q_heads, dim, prompt = 8, 32, 128, 32768
device, dtype = "cuda", torch.float16

# The prompt's cache, as a model holds it, and the index over it.
k_cache = torch.randn(1, prompt, kv_heads, dim, device=device, dtype=dtype)
v_cache = torch.randn_like(k_cache)
keys = k_cache[0].transpose(0, 1).contiguous()  # [kv_heads, tokens, dim]
values = v_cache[0].transpose(0, 1).contiguous()
index = cudaops.ivf.build_global(keys, values, n_clusters=2048, n_segments=8,
                                 capacity=prompt + 4096, max_clusters=2048 + 256)
n_probe, n_estimate = 37, 475  # 1.8% and 23.2% of the clusters

recent_k = torch.empty(kv_heads, 0, dim, device=device, dtype=dtype)
recent_v = torch.empty_like(recent_k)
for _ in range(2048):
    # The new token's key and value (a model's layer would produce them) and the queries.
    k_new = torch.randn(kv_heads, 1, dim, device=device, dtype=dtype)
    v_new = torch.randn_like(k_new)
    recent_k = torch.cat([recent_k, k_new], 1)
    recent_v = torch.cat([recent_v, v_new], 1)
    queries = torch.randn(q_heads, 1, dim, device=device, dtype=dtype)
    o = index.attention(queries, n_probe, n_estimate, extra_keys=recent_k,
                        extra_values=recent_v)  # [q_heads, 1, dim]
    if recent_k.shape[1] == 1024:  # index the recent tokens: 64 new clusters a head
        index.extend(recent_k, recent_v, 64)
        recent_k, recent_v = recent_k[:, :0], recent_v[:, :0]
torch.cuda.synchronize()
print(f"{index.size} tokens in {index.n_clusters} clusters a head; last output {tuple(o.shape)}")

index.save("decode_loop.ivf")
again = cudaops.ivf.load("decode_loop.ivf")
assert again.size == index.size and again.n_clusters == index.n_clusters
print("saved and loaded:", again)
