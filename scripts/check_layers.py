#!/usr/bin/env python3
"""The include layering of the tree, checked: each folder includes only the folders below it.

    scripts/check_layers.py            # exit 1 and one line per forbidden include
    scripts/check_layers.py --graph    # the folder-level include graph (edges with counts)

An include "a/b.h" names folder a (under include/ for cudaops/, src/ for the library's folders, dev/
for the kit's); an include without a folder is the including folder's own. The layers, lowest
first (docs/architecture.md says why):

    cudaops (include/cudaops: the public API)
    core    host and device infrastructure: status, checks, launch, dispatch, the generator
    device  device primitives that no op owns: warp sums, async copies, mma, mbarriers, clusters
    io jit  checked files; the run-time compiler
    engine  multi-kernel stages that several families run (k-means' assignment, update and fit)
    families  elementwise rowwise topk kmeans ivf: one op family each, never another's files
    dev/    the kit (reference, harness): the library never includes it
    apps bindings bench examples: the public API and the kit
Tests may include anything: they test internals.
"""

import collections
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)

BASE = {"cudaops"}
LIBRARY_SHARED = {"core", "device", "engine", "io"}
RULES = {
    "src/core": BASE | {"core"},
    "src/device": BASE | {"core", "device"},
    "src/io": BASE | {"core", "io"},
    "src/jit": BASE | {"core", "jit"},
    "src/engine": BASE | {"core", "device", "engine"},
    "dev/reference": BASE | {"core", "reference"},
    "dev/harness": BASE | {"core", "io", "reference", "harness"},
    "apps": BASE | {"harness", "reference"},
    "bench": BASE | {"harness", "reference"},
    "examples": BASE,
    "bindings/python/src": BASE | {".."},
    "include/cudaops": BASE,
}
FAMILIES = ["elementwise", "rowwise", "topk", "kmeans", "ivf", "attention"]
for family in FAMILIES:
    RULES["src/" + family] = BASE | LIBRARY_SHARED | {family}
SOURCE = (".h", ".hpp", ".cpp", ".cu", ".cuh")


def folder_of(path):
    """The rule that governs a file (the longest matching prefix), or None (tests, anything else)."""
    best = None
    for prefix in RULES:
        if path == prefix or path.startswith(prefix + "/"):
            if best is None or len(prefix) > len(best):
                best = prefix
    return best


def tracked_sources():
    out = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True)
    return [p for p in out.stdout.split() if p.endswith(SOURCE)]


def main():
    graph = "--graph" in sys.argv[1:]
    edges = collections.Counter()
    bad = []
    for path in tracked_sources():
        rule = folder_of(path)
        with open(os.path.join(ROOT, path), encoding="utf-8", errors="replace") as f:
            text = f.read()
        for name in INCLUDE.findall(text):
            if "/" not in name:
                continue  # the folder's own, or a generated header beside it
            target = name.split("/")[0]
            src = rule if rule else os.path.dirname(path)
            edges[(src, target)] += 1
            if rule is not None and target not in RULES[rule]:
                bad.append(f"{path}: includes \"{name}\" ({rule} may include: "
                           f"{', '.join(sorted(RULES[rule]))})")
    if graph:
        for (src, target), count in sorted(edges.items()):
            print(f"{src:24} -> {target:10} {count}")
    for line in bad:
        print(line)
    if bad:
        print(f"{len(bad)} forbidden include(s): see the layers in scripts/check_layers.py",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
