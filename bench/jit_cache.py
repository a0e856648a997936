#!/usr/bin/env python3
"""The JIT's cold compile against a disk-cache hit, each in a fresh `cudaops jit` process.

    python3 bench/jit_cache.py [path/to/cudaops] [--runs N]

The cache goes in a new temporary directory. The first run compiles (NVRTC) and stores; each
later run is a new process that finds the entry on disk. "ready" is the time from the compile()
call to a kernel loaded on the GPU (cache lookup, verification, module load), after the CUDA
context exists; the context's own cost is shown beside it. Prints a Markdown table.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run(cli, cache, extra=()):
    command = [cli, "jit", os.path.join(ROOT, "test/cli/jit_kernels.cu"), "--kernel", "saxpy",
               "-I", os.path.join(ROOT, "test/cli/jit_include"), "--json", *extra]
    done = subprocess.run(command, env=dict(os.environ, CUDAOPS_CACHE_DIR=cache),
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        sys.exit(f"{' '.join(command)} failed ({done.returncode}):\n{done.stdout}{done.stderr}")
    return json.loads(done.stdout)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("cli", nargs="?", default=os.path.join(ROOT, "build/gpu/apps/cudaops"))
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as cache:
        cold = [run(args.cli, cache, ["--no-cache"]) for _ in range(3)]
        first = run(args.cli, cache)
        assert first["source"] == "compiled", first
        hits = [run(args.cli, cache) for _ in range(args.runs)]
        assert all(h["source"] == "disk cache" for h in hits), hits
    med = lambda rows, key: statistics.median(r[key] for r in rows)  # noqa: E731
    print(f"JIT, `cudaops jit test/cli/jit_kernels.cu --kernel saxpy` ({first['arch']}, "
          f"NVRTC {first['nvrtc'].split()[0]}), fresh process each, median of the runs:")
    print()
    print("| case | runs | ready (ms) | compile() (ms) | load (ms) | NVRTC (ms) | CUDA context (ms) |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    print(f"| cold compile (no cache) | {len(cold)} | {med(cold, 'ready_ms'):.2f} | "
          f"{med(cold, 'compile_call_ms'):.2f} | {med(cold, 'load_ms'):.2f} | "
          f"{med(cold, 'nvrtc_ms'):.1f} | {med(cold, 'context_ms'):.1f} |")
    print(f"| disk-cache hit | {len(hits)} | {med(hits, 'ready_ms'):.2f} | "
          f"{med(hits, 'compile_call_ms'):.2f} | {med(hits, 'load_ms'):.2f} | - | "
          f"{med(hits, 'context_ms'):.1f} |")
    print()
    worst = max(h["ready_ms"] for h in hits)
    print(f"disk-cache hit, slowest of {len(hits)}: {worst:.2f} ms (target <= 5 ms)")


if __name__ == "__main__":
    main()
