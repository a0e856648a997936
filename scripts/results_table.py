#!/usr/bin/env python3
"""Writes bench/RESULTS.md from the GPU check's JSON: one section per GPU, with a table per op of
every dtype at its standard shapes, and the comparisons with torch the check measured.

    scripts/results_table.py --device "NVIDIA H100 80GB HBM3" --commit abc1234 --date 2026-11-25 \
        --bench bench.json [--stream bench-stream.json] [--extra torch.md ...] [--results PATH]

--bench: `cudaops bench --offsets 0 --json` (single calls); --stream: the same in runs of 20
calls (`--calls 20`); --extra: Markdown the Python benches printed (torch side by side, per-call
host cost), each kept as it is under the section. --update OP=JSON@COMMIT: OP's rows from another
bench JSON, measured at COMMIT after the rest (its table says so). The section of this device
replaces the one already in the file (if any); other GPUs' sections are kept.

    scripts/results_table.py --device "NVIDIA H100 80GB HBM3" --amend [--extra decode.md ...] \
        [--table " (float32 products)"=bench-kmeans.json@abc1234@2026-12-08]

--amend keeps the device's section as it stands and adds to it: each --extra block replaces the
block of the same first line (a "### " heading) or is appended; each --table SUFFIX=JSON@COMMIT@DATE
renders that bench JSON's rows as a table per op under "### OP" + SUFFIX, likewise.
"""

import argparse
import json
import re
import sys
from pathlib import Path

HEADER = """# Results

The current numbers of every op, per GPU, as the GPU check (`scripts/gpu_check.sh`) measured them
and wrote this file (`scripts/results_table.py`; do not edit by hand). CUDA events, median of
the timed runs after warm-up, inputs larger than L2 where the shape allows. Bandwidth counts every
input read once and every output written once; "of copy" is that over a device-to-device copy
of 1 GiB measured in the same run; "of GEMM" is the tensor-core rate over a cuBLAS GEMM of the
same FLOPs measured in the same run. "stream of 20": the time per call in runs of 20 calls back
to back, as a model makes them. The history of these numbers and the design reasoning behind
each kernel family are in `docs/tuning/` and `docs/history/`.
"""

MARK = "<!-- gpu: {} -->"


# Sizes shown only where they differ from these (the options every standard shape shares).
USUAL = {"pad": 0, "largest": 1, "sorted": 1, "index32": 0, "center": 0, "keys_model": 0}


def shape_text(dims):
    words = []
    for k, v in dims.items():
        if USUAL.get(k) == v:
            continue
        if k in ("metric", "cosine"):
            words.append("cosine" if v else "l2")
        else:
            words.append(f"{k}={v}")
    return " ".join(words)


def load(path):
    with open(path) as f:
        return json.load(f)


def table(results, stream, notes=None):
    """Markdown per op: rows of dtype x shape; notes[op], a line under its heading."""
    by_op = {}
    for r in results:
        by_op.setdefault(r["op"], []).append(r)
    streamed = {}
    for r in stream or []:
        streamed[(r["op"], r["dtype"], json.dumps(r["dims"], sort_keys=True))] = r
    out = []
    for op, rows in by_op.items():
        tensor = any("tflops" in r for r in rows)
        has_stream = any((op, r["dtype"], json.dumps(r["dims"], sort_keys=True)) in streamed
                         for r in rows)
        out.append(f"### {op}\n")
        if notes and op in notes:
            out.append(notes[op] + "\n")
        head = ["dtype", "shape", "time (us)"]
        head += ["TFLOP/s", "of GEMM"] if tensor else ["GB/s", "of copy"]
        if has_stream:
            head += ["stream of 20 (us)", "of copy"]
        head.append("path")
        out.append("| " + " | ".join(head) + " |")
        out.append("|" + "|".join("---" if h in ("dtype", "shape", "path") else "---:"
                                  for h in head) + "|")
        for r in rows:
            cells = [r["dtype"], shape_text(r["dims"]), f"{r['time_us']['median']:.2f}"]
            if tensor:
                cells += [f"{r['tflops']:.1f}", f"{r['pct_of_gemm']:.1f}%"]
            else:
                cells += [f"{r['gbps']:.0f}", f"{r['pct_of_copy']:.1f}%"]
            if has_stream:
                s = streamed.get((op, r["dtype"], json.dumps(r["dims"], sort_keys=True)))
                cells += ([f"{s['time_us']['median']:.2f}", f"{s['pct_of_copy']:.1f}%"] if s
                          else ["-", "-"])
            cells.append(r.get("launch", "").split(":")[0] or "-")
            out.append("| " + " | ".join(cells) + " |")
        out.append("")
    return "\n".join(out)


def section(args):
    bench = load(args.bench)
    stream = load(args.stream)["results"] if args.stream else None
    copy = bench["copy"]
    results = bench["results"]
    notes = {}
    for update in args.update:
        op, _, rest = update.partition("=")
        path, _, commit = rest.rpartition("@")
        newer = load(path)
        rows = [r for r in newer["results"] if r["op"] == op]
        if not rows:
            sys.exit(f"--update {update}: no results of {op} in {path}")
        # In place of the op's old rows, where they stood.
        first = next((i for i, r in enumerate(results) if r["op"] == op), len(results))
        results = ([r for r in results[:first] if r["op"] != op] + rows +
                   [r for r in results[first:] if r["op"] != op])
        notes[op] = (f"Measured at commit {commit}, after the rest of this section "
                     f"(device-to-device copy in that run: {newer['copy']['gbps']:.0f} GB/s).")
    lines = [MARK.format(args.device), f"## {args.device}", "",
             f"Measured {args.date} at commit {args.commit}. Device-to-device copy: "
             f"{copy['gbps']:.0f} GB/s.", "", table(results, stream, notes)]
    for extra in args.extra:
        text = Path(extra).read_text().strip()
        if text:
            lines += [text, ""]
    return "\n".join(lines).rstrip() + "\n"


def blocks(text):
    """The "### " blocks of a section's text after its head: (head, [(first line, block)])."""
    parts = re.split(r"(?=^### )", text, flags=re.M)
    return parts[0], [(p.splitlines()[0], p.rstrip() + "\n") for p in parts[1:]]


def amended(old_section, args):
    """The device's section with the --extra and --table blocks in place of those of the same
    heading, or appended."""
    head, kept = blocks(old_section)
    new = []
    for extra in args.extra:
        text = Path(extra).read_text().strip()
        if text:
            new.append(text + "\n")
    for spec in args.table:
        suffix, _, rest = spec.partition("=")
        path, commit, date = rest.rsplit("@", 2)
        bench = load(path)
        for op in dict.fromkeys(r["op"] for r in bench["results"]):
            rows = [r for r in bench["results"] if r["op"] == op]
            body = table(rows, None).split("\n", 1)[1]  # without the op's own heading
            new.append(f"### {op}{suffix}\n\nMeasured {date} at commit {commit} (device-to-device "
                       f"copy in that run: {bench['copy']['gbps']:.0f} GB/s).\n{body.rstrip()}\n")
    out = dict(kept)
    order = [first for first, _ in kept]
    for block in new:
        first = block.splitlines()[0]
        if first not in out:
            order.append(first)
        out[first] = block
    return head.rstrip() + "\n\n" + "\n".join(out[f] for f in order)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", required=True)
    parser.add_argument("--commit")
    parser.add_argument("--date")
    parser.add_argument("--bench")
    parser.add_argument("--amend", action="store_true")
    parser.add_argument("--table", action="append", default=[], metavar="TITLE=JSON@COMMIT@DATE")
    parser.add_argument("--stream")
    parser.add_argument("--extra", nargs="*", default=[])
    parser.add_argument("--update", action="append", default=[], metavar="OP=JSON@COMMIT")
    parser.add_argument("--results", default=str(Path(__file__).resolve().parent.parent /
                                                  "bench" / "RESULTS.md"))
    args = parser.parse_args()
    if not args.amend and not (args.bench and args.commit and args.date):
        parser.error("--bench, --commit and --date are needed (or --amend)")
    path = Path(args.results)
    old = path.read_text() if path.exists() else ""
    # The other GPUs' sections, as they were; this one's in its place.
    parts, mine = [], None
    for part in re.split(r"(?=^<!-- gpu: )", old, flags=re.M)[1:]:
        name = re.match(r"<!-- gpu: (.*?) -->", part).group(1)
        if name == args.device:
            mine = len(parts)
            parts.append(part)
        else:
            parts.append(part.rstrip() + "\n")
    if args.amend:
        if mine is None:
            sys.exit(f"--amend: no section of {args.device} in {path}")
        parts[mine] = amended(parts[mine], args)
    else:
        parts = [p for i, p in enumerate(parts) if i != mine]
        parts.insert(0, section(args))
    path.write_text(HEADER + "\n" + "\n".join(p.rstrip() + "\n" for p in parts))
    print(f"wrote {path}", file=sys.stderr)


if __name__ == "__main__":
    main()
