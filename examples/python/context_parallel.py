"""A decode step over an index split across GPUs with torch.distributed (docs/torch.md).

    torchrun --nproc-per-node 2 examples/python/context_parallel.py [--mode context|heads]
        [--backend nccl|gloo] [--tokens N] [--check] [--save DIR]

context: rank r indexes tokens [r S / R, (r + 1) S / R) of every head; each step attends its
part and the ranks merge the partial outputs exactly (one all_gather, attention_merge).
heads: rank r indexes and attends its own kv heads (and their query heads); no traffic.
--check probes every cluster (exact attention) and compares the result with dense attention over
the whole cache in float64; --save writes each rank's index and reloads it (a sharded index
restarts on the same number of ranks). gloo runs several ranks on one GPU (through the host).
"""

import argparse
import os

import torch
import torch.distributed as dist

import cudaops
import cudaops.torch as ct


def dense(keys, values, queries, scale):
    group = queries.shape[0] // keys.shape[0]
    k = keys.double().repeat_interleave(group, 0)
    v = values.double().repeat_interleave(group, 0)
    p = torch.softmax(torch.einsum("gqd,gtd->gqt", queries.double(), k) * scale, -1)
    return torch.einsum("gqt,gtd->gqd", p, v)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--mode", choices=["context", "heads"], default="context")
    parser.add_argument("--backend", default="nccl")
    parser.add_argument("--tokens", type=int, default=65536)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--q-heads", type=int, default=32)
    parser.add_argument("--dim", type=int, default=128)
    parser.add_argument("--check", action="store_true")
    parser.add_argument("--save", help="a directory for each rank's index")
    args = parser.parse_args()

    dist.init_process_group(args.backend)
    rank, world = dist.get_rank(), dist.get_world_size()
    local = int(os.environ.get("LOCAL_RANK", rank))
    torch.cuda.set_device(local % torch.cuda.device_count())
    g = torch.Generator(device="cuda").manual_seed(0)  # every rank draws the same cache
    h, hq, d, s = args.heads, args.q_heads, args.dim, args.tokens
    keys = torch.randn(h, s, d, device="cuda", generator=g).half()
    values = torch.randn(h, s, d, device="cuda", generator=g).half()
    queries = torch.randn(hq, 1, d, device="cuda", generator=g).half()

    if args.mode == "context":
        k_part = ct.context_parallel_slice(keys, rank, world)
        v_part = ct.context_parallel_slice(values, rank, world)
        q_part = queries
    else:
        k_part, v_part = ct.head_slice(keys, rank, world), ct.head_slice(values, rank, world)
        q_part = ct.head_slice(queries, rank, world)
    clusters = max(16, k_part.shape[1] // 16 // 16 * 16)
    index = cudaops.ivf.build_global(k_part, v_part, clusters, 16)
    n_probe = clusters if args.check else max(1, round(0.018 * clusters))
    n_estimate = 0 if args.check else round(0.232 * clusters)

    def step(ix):
        if args.mode == "context":
            return ct.context_parallel_attention(ix, q_part, n_probe, n_estimate)
        return ix.attention(q_part, n_probe, n_estimate)

    o = step(index)
    if args.save:
        os.makedirs(args.save, exist_ok=True)
        path = os.path.join(args.save, f"index.rank{rank}-of-{world}.ivf")
        index.save(path)
        assert torch.equal(step(cudaops.ivf.load(path)), o), "a reloaded shard differs"
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for _ in range(5):
        step(index)
    start.record()
    for _ in range(20):
        step(index)
    end.record()
    torch.cuda.synchronize()
    if rank == 0:
        print(f"{args.mode} x{world} ({args.backend}): {s} tokens, {clusters} clusters a rank, "
              f"{start.elapsed_time(end) / 20 * 1e3:.1f} us a step")
    if args.check:
        if args.mode == "heads":
            parts = [torch.empty_like(o) for _ in range(world)]
            if args.backend == "gloo":
                parts = [p.cpu() for p in parts]
            dist.all_gather(parts, o.cpu() if args.backend == "gloo" else o)
            o = torch.cat([p.to(queries.device) for p in parts])
        want = dense(keys, values, queries, d ** -0.5)
        err = float(((o.double() - want).norm(dim=-1) / want.norm(dim=-1)).max())
        print(f"rank {rank}: max relative error {err:.2e}")
        if err > 1e-3:
            raise SystemExit(f"rank {rank}: check failed")
        if rank == 0:
            print("check: ok")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
