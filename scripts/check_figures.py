#!/usr/bin/env python3
"""Figures live in one place, bench/RESULTS.md: a measured figure quoted elsewhere must be there.

    scripts/check_figures.py [FILE...]     # default: README.md; exit 1 naming each stray figure

A figure is a number with a unit of time, rate or ratio (`36.0 us`, `1.45 ms`, `3.2 TB/s`,
`7.1x`, `96%`). Each one in FILE must appear, as written, in bench/RESULTS.md; a figure that
RESULTS does not hold is either stale or belongs there first. Build and install durations
(`4 minutes`, `234 s`) and sizes (`35 MB`) are not measurements of the ops and are not checked.
"""

import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIGURE = re.compile(
    r"(?<![\w.])(\d+(?:\.\d+)?)\s?(ms|us|µs|ns|GB/s|TB/s|TFLOP/s|GFLOP/s|x|%)(?![\w/])")


def figures(text):
    """Each (number, unit) quoted in text, outside fenced code blocks."""
    out = []
    fenced = False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        if not fenced:
            out.extend(FIGURE.findall(line))
    return out


def main():
    files = sys.argv[1:] or ["README.md"]
    with open(os.path.join(ROOT, "bench", "RESULTS.md"), encoding="utf-8") as f:
        results = f.read()
    held = {(n, u.replace("µs", "us")) for n, u in FIGURE.findall(results)}
    bad = 0
    for name in files:
        with open(os.path.join(ROOT, name), encoding="utf-8") as f:
            for number, unit in figures(f.read()):
                if (number, unit.replace("µs", "us")) not in held:
                    print(f"{name}: quotes {number} {unit}, which bench/RESULTS.md does not hold")
                    bad += 1
    if bad:
        print(f"{bad} figure(s) not in bench/RESULTS.md: link to it, or put them there first",
              file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
