#!/usr/bin/env python3
"""PTX and SASS listings of every kernel in libcudaops, with the compiler's resource report.

    listings.py write --build-dir BUILD [--out DIR] [--jobs N]
    listings.py check DIR
    listings.py all --build-dir BUILD [--out DIR] [--jobs N]    (write, then check)

`write` compiles each CUDA source of the library again with the exact command of the build
(compile_commands.json), adding `-Xptxas -v` and `--keep`, so the listings describe the code
the library carries, for every architecture the build targets. It writes, under DIR (default
BUILD/listings):

    <source>/<arch>.ptx         the PTX of each virtual architecture (compute_XX)
    <source>/<arch>.sass        the SASS of each real architecture (sm_XX), from cuobjdump
    <source>/ptxas.txt          the compiler's report as printed
    resources.md                one row per kernel and architecture: registers, spills, stack,
                                static shared memory, barriers, and whether it loads 16 bytes
    resources.json              the same, for tools

`check` reads resources.json and fails (exit 1) when
  - a kernel spills registers to local memory, unless SPILL_ALLOWED names it with a reason;
  - a kernel that REGISTER_LIMITS names takes more registers than it allows on its architecture;
  - an elementwise or row-wise kernel has no 16-byte (or wider) global load in its SASS,
    unless NARROW_ALLOWED names it with a reason.

Needs nvcc (from the build) and cuobjdump: the CUDA toolkit's, or the one of the
`nvidia-cuda-cuobjdump` wheel. Exit status 77 when cuobjdump is missing (a test reports it
skipped).
"""
import argparse
import concurrent.futures
import glob
import json
import os
import re
import shlex
import shutil
import subprocess
import sys

# Kernels that may spill: (regex on the demangled name, why).
SPILL_ALLOWED = [
    (r"norm_backward_streamed<(true|\(bool\)1), float, (\(int\))?4>",
     "layer-norm backward over rows too wide to cache, float32: 1024 threads per block cap it at "
     "64 registers, and it keeps 8 bytes of loop state in local memory, which stays in L1; the "
     "kernel is bound by its three global streams"),
    (r"softmax_backward_pipelined<(__half|__nv_bfloat16)>",
     "512 threads hold y and dy of rows up to 32768 16-bit columns in registers (64 of the 128 "
     "registers); 96 bytes of temporaries go to local memory, which stays in L1. With 1024 "
     "threads (64 registers) it spilled less but ran slower: 81.8% against 86.3% of copy at "
     "4096 x 32768 bf16 on an H100"),
    (r"topk_values_kernel<",
     "each thread holds 32 keys of its tile in registers, capped at 64 by two 512-thread (or "
     "eight 128-thread) blocks per SM; the tiles that are not their row's last spill 8 to 120 "
     "bytes of loop state, and the last tiles up to about 180 bytes around their sorts of the "
     "candidates (once per block); the cluster tiles (64 values per thread, 128 registers, one "
     "block per SM) 110 to 150 bytes around theirs; all of which stays in L1"),
    (r"topk_gather_kernel<.*?, (true|\(bool\)1)>",
     "the row's last gathering block holds up to 8 items per thread in its sorts beside the "
     "chunk state, at its cap of 128 registers (512 threads); 68 to 124 bytes go to local "
     "memory (the 16-bit types' bucket sort of primary words the most), which stays in L1, "
     "once per block"),
    (r"small_fit_kernel<",
     "512 threads (16 warps, to hide the latencies of the sums) cap it at 128 registers, which "
     "the products' accumulators and the arg-min take; rows of 128 16-bit values (kL = 16) "
     "fit, other widths leave up to about 120 bytes of values set before the iterations in "
     "local memory, read once or twice per iteration"),
    (r"sum_kernel<",
     "k-means' sums: a warp per cluster (or the changed ones of 32 clusters in turn) at a cap of "
     "64 registers (sixteen two-warp blocks per SM), four rows' loads in flight per lane; 12 to "
     "68 bytes of the span's and the cluster's loop state go to local memory, stored and loaded "
     "once per cluster (or per 32 of its rows), outside the loads and sums of its rows, and "
     "stay in L1"),
    (r"layer_norm_pipelined<__nv_bfloat16>",
     "1024 threads cap it at 64 registers, holding the row and the weight; 8 bytes of loop state "
     "stay in local memory (L1)"),
]

# Kernels held to a register count on an architecture: (regex on the demangled name, arch,
# most registers, why). For kernels whose speed hangs on a count that the compiler reaches only
# for one arrangement of otherwise equivalent code.
REGISTER_LIMITS = [
    (r"norm_backward_cached<(false|\(bool\)0), (__half|__nv_bfloat16), 128, 4, 8, "
     r"(true|\(bool\)1)>", "sm_90", 136,
     "the split rms_norm backward: at 136 registers it measured 92-93% of copy (bf16, "
     "4096 x 32768, H100), at 162 (the next row's index taken after the loads) 87%"),
]

# Sources whose kernels must read global memory 16 bytes at a time.
WIDE_LOAD_SOURCES = ("elementwise", "softmax", "norm", "rowwise_launch")

# Kernels of those sources that need not: (regex on the demangled name, why).
NARROW_ALLOWED = [
    (r"elementwise_scalar_kernel",
     "the fallback for operands whose addresses differ modulo 16 bytes: no common vector "
     "alignment exists, so it reads one element per load (the vector kernel serves every "
     "other case)"),
    (r"_streamed<.*?, (\(int\))?1>\(",
     "the row-wise fallback for rows whose address or stride is not a multiple of 16 bytes: "
     "it reads one element per load; aligned rows run the 16-byte instantiation"),
    (r"reduce_partials_kernel",
     "sums the float32 per-block partials of dweight/dbias down columns, a few KiB per "
     "launch; its loads are coalesced 4-byte column reads"),
]

# 16-byte or wider global loads as SASS spells them: LDG.E.128 (.CONSTANT, ...), the 256-bit
# loads of sm_100 and newer, cp.async into shared memory (LDGSTS ... .128) and bulk/TMA copies.
WIDE_LOAD = re.compile(r"\b(LDG(\.\w+)*\.(128|256)|LDGSTS(\.\w+)*\.128|UBLKCP|UTMALDG)\b")
ANY_GLOBAL_LOAD = re.compile(r"\b(LDG|LDGSTS|UBLKCP|UTMALDG)\b")


def find_tool(name, nvcc):
    candidates = [os.path.join(os.path.dirname(nvcc), name)]
    found = shutil.which(name)
    if found:
        candidates.insert(0, found)
    for entry in sys.path:  # the nvidia-cuda-<tool> wheels
        candidates += sorted(glob.glob(os.path.join(entry, "nvidia", "cu*", "bin", name)))
    for path in candidates:
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    return None


def demangle(names):
    if not names:
        return {}
    # c++filt first: the allowance patterns below are written in its spelling.
    tool = shutil.which("c++filt") or shutil.which("cu++filt")
    if not tool:
        return {n: n for n in names}
    out = subprocess.run([tool], input="\n".join(names), capture_output=True, text=True,
                         check=True).stdout.splitlines()
    return dict(zip(names, out)) if len(out) == len(names) else {n: n for n in names}


def library_commands(build_dir, target_dir):
    path = os.path.join(build_dir, "compile_commands.json")
    if not os.path.isfile(path):
        sys.exit(f"listings: {path} is missing; configure with -DCMAKE_EXPORT_COMPILE_COMMANDS=ON "
                 "(every preset does)")
    with open(path) as f:
        entries = json.load(f)
    chosen = []
    for e in entries:
        args = e["arguments"] if "arguments" in e else shlex.split(e["command"])
        out = e.get("output") or (args[args.index("-o") + 1] if "-o" in args else "")
        if e["file"].endswith(".cu") and f"{target_dir}/" in out.replace(os.sep, "/"):
            chosen.append((e["directory"], e["file"], args))
    if not chosen:
        sys.exit(f"listings: no CUDA source of {target_dir} in {path}")
    return chosen


def strip_output_args(args):
    """The build's command without its output and dependency-file arguments."""
    kept, skip = [], False
    for a in args:
        if skip:
            skip = False
            continue
        if a in ("-o", "-MF", "-MT", "-MQ", "-MJ"):
            skip = True
            continue
        if a in ("-MD", "-MMD") or a.startswith("-MF") or a.startswith("-MT"):
            continue
        kept.append(a)
    return kept


PTXAS_ENTRY = re.compile(r"Compiling entry function '([^']+)' for '(sm_\w+)'")
PTXAS_FRAME = re.compile(
    r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
PTXAS_USED = re.compile(r"Used (\d+) registers")
PTXAS_BARRIERS = re.compile(r"used (\d+) barriers")
PTXAS_SMEM = re.compile(r"(\d+) bytes smem")


def parse_ptxas(text):
    """{(mangled name, arch): {registers, stack, spill_stores, spill_loads, smem, barriers}}"""
    kernels, current = {}, None
    for line in text.splitlines():
        m = PTXAS_ENTRY.search(line)
        if m:
            current = kernels.setdefault((m.group(1), m.group(2)), {
                "registers": 0, "stack": 0, "spill_stores": 0, "spill_loads": 0, "smem": 0,
                "barriers": 0})
            continue
        if current is None:
            continue
        m = PTXAS_FRAME.search(line)
        if m:
            current["stack"], current["spill_stores"], current["spill_loads"] = map(int, m.groups())
        m = PTXAS_USED.search(line)
        if m:
            current["registers"] = int(m.group(1))
            b = PTXAS_BARRIERS.search(line)
            current["barriers"] = int(b.group(1)) if b else 0
            s = PTXAS_SMEM.search(line)
            current["smem"] = int(s.group(1)) if s else 0
    return kernels


SASS_FUNCTION = re.compile(r"^\s*Function : (\S+)")


def parse_sass(text):
    """{mangled name: (wide loads, global loads)} counted over the SASS of each function."""
    counts, current = {}, None
    for line in text.splitlines():
        m = SASS_FUNCTION.match(line)
        if m:
            current = counts.setdefault(m.group(1), [0, 0])
            continue
        if current is not None and "/*" in line:
            code = line.split("*/", 1)[-1]
            if WIDE_LOAD.search(code):
                current[0] += 1
            if ANY_GLOBAL_LOAD.search(code):
                current[1] += 1
    return {k: tuple(v) for k, v in counts.items()}


def write_one(directory, source, args, out_dir, cuobjdump):
    stem = os.path.splitext(os.path.basename(source))[0]
    dest = os.path.join(out_dir, stem)
    keep = os.path.join(dest, "keep")
    shutil.rmtree(dest, ignore_errors=True)
    os.makedirs(keep)
    cmd = strip_output_args(args) + [
        "-Xptxas=-v", "--keep", f"--keep-dir={keep}", "-o", os.path.join(keep, stem + ".o")]
    run = subprocess.run(cmd, cwd=directory, capture_output=True, text=True)
    with open(os.path.join(dest, "ptxas.txt"), "w") as f:
        f.write(run.stderr)
    if run.returncode != 0:
        raise RuntimeError(f"compiling {source} failed:\n{run.stderr[-4000:]}")
    for ptx in glob.glob(os.path.join(keep, "*.ptx")):
        with open(ptx) as f:
            m = re.search(r"^\.target\s+sm_(\w+)", f.read(), re.M)
        arch = "compute_" + m.group(1) if m else os.path.basename(ptx)
        shutil.copy(ptx, os.path.join(dest, arch + ".ptx"))
    sass = {}
    for cubin in glob.glob(os.path.join(keep, "*.cubin")):
        text = subprocess.run([cuobjdump, "-sass", cubin], capture_output=True, text=True,
                              check=True).stdout
        # The architecture as the cubin states it (a build for one architecture names its
        # cubin without it).
        m = re.search(r"code for (sm_\w+)", text) or re.search(r"sm_\w+?(?=\.|$)", cubin)
        arch = m.group(1 if m.re.groups else 0) if m else os.path.basename(cubin)
        with open(os.path.join(dest, arch + ".sass"), "w") as f:
            f.write(text)
        sass[arch] = parse_sass(text)
    shutil.rmtree(keep)
    rows = []
    for (name, arch), res in sorted(parse_ptxas(run.stderr).items()):
        wide, loads = sass.get(arch, {}).get(name, (None, None))
        rows.append(dict(source=stem, arch=arch, kernel=name, wide_loads=wide,
                         global_loads=loads, **res))
    return rows


def write(args):
    build_dir = os.path.abspath(args.build_dir)
    out_dir = os.path.abspath(args.out or os.path.join(build_dir, "listings"))
    commands = library_commands(build_dir, args.target_dir)
    nvcc = commands[0][2][0]
    cuobjdump = find_tool("cuobjdump", nvcc)
    if not cuobjdump:
        print("listings: cuobjdump not found (CUDA toolkit, PATH, or "
              "`pip install nvidia-cuda-cuobjdump`)", file=sys.stderr)
        return 77
    os.makedirs(out_dir, exist_ok=True)
    rows = []
    with concurrent.futures.ThreadPoolExecutor(args.jobs or os.cpu_count()) as pool:
        futures = [pool.submit(write_one, d, s, a, out_dir, cuobjdump) for d, s, a in commands]
        for f in futures:
            rows += f.result()
    names = demangle(sorted({r["kernel"] for r in rows}))
    for r in rows:
        r["demangled"] = names.get(r["kernel"], r["kernel"])
    with open(os.path.join(out_dir, "resources.json"), "w") as f:
        json.dump(rows, f, indent=1)
    with open(os.path.join(out_dir, "resources.md"), "w") as f:
        f.write("| source | arch | registers | spill st/ld (B) | stack (B) | smem (B) | barriers "
                "| 16-byte loads / global loads | kernel |\n")
        f.write("|---|---|---:|---:|---:|---:|---:|---:|---|\n")
        for r in rows:
            loads = "-" if r["wide_loads"] is None else f"{r['wide_loads']} / {r['global_loads']}"
            f.write(f"| {r['source']} | {r['arch']} | {r['registers']} | {r['spill_stores']}/"
                    f"{r['spill_loads']} | {r['stack']} | {r['smem']} | {r['barriers']} | "
                    f"{loads} | `{short_name(r['demangled'])}` |\n")
    print(f"listings: {len(rows)} kernels ({len(commands)} sources) in {out_dir}")
    args.dir = out_dir
    return 0


def short_name(name, limit=160):
    return name if len(name) <= limit else name[:limit - 3] + "..."


def allowed(rules, name):
    for pattern, why in rules:
        if re.search(pattern, name):
            return why
    return None


def check(args):
    with open(os.path.join(args.dir, "resources.json")) as f:
        rows = json.load(f)
    problems = []
    for r in rows:
        name = r["demangled"]
        where = f"{r['source']} {r['arch']} {short_name(name, 200)}"
        if (r["spill_stores"] or r["spill_loads"]) and not allowed(SPILL_ALLOWED, name):
            problems.append(f"spills {r['spill_stores']} B stored / {r['spill_loads']} B loaded: "
                            f"{where}")
        for pattern, arch, most, _ in REGISTER_LIMITS:
            if r["arch"] == arch and re.search(pattern, name) and r["registers"] > most:
                problems.append(f"{r['registers']} registers, more than {most}: {where}")
        if r["source"] in WIDE_LOAD_SOURCES and not allowed(NARROW_ALLOWED, name):
            if r["wide_loads"] is None:
                problems.append(f"no SASS found for: {where}")
            elif r["wide_loads"] == 0:
                problems.append(f"no 16-byte global load ({r['global_loads']} narrower): {where}")
    wide = sum(1 for r in rows if r["source"] in WIDE_LOAD_SOURCES)
    print(f"listings check: {len(rows)} kernels, {wide} of them held to 16-byte loads, "
          f"{len(problems)} problems")
    for p in problems:
        print("  " + p)
    return 1 if problems else 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name, text in (("write", "compile again with the build's commands and write listings"),
                       ("all", "write, then check")):
        w = sub.add_parser(name, help=text)
        w.add_argument("--build-dir", required=True)
        w.add_argument("--out")
        w.add_argument("--target-dir", default="CMakeFiles/cudaops.dir",
                       help="object directory of the library target in compile_commands.json")
        w.add_argument("--jobs", type=int, default=0)
    c = sub.add_parser("check", help="fail on spills and on narrow loads where wide ones belong")
    c.add_argument("dir")
    args = parser.parse_args()
    if args.command == "check":
        return check(args)
    status = write(args)
    return check(args) if status == 0 and args.command == "all" else status


if __name__ == "__main__":
    sys.exit(main())
