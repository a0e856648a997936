#!/usr/bin/env python3
"""Compares the SASS of two builds of the library, kernel by kernel.

    cuobjdump -sass OLD/libcudaops.so > old.sass
    cuobjdump -sass NEW/libcudaops.so > new.sass
    scripts/sass_compare.py old.sass new.sass     # exit 1 if any kernel differs

A change of layout (files moved, renamed, split) must leave every kernel's machine code as it was.
Two things change with a file's name and are ignored: the anonymous namespace's name in mangled
names (it carries a hash of the translation unit) and the instructions' addresses. A kernel
present in one build only, or with other instructions, is listed.
"""

import re
import sys

# _GLOBAL__N__<8 hex>_<len>_<file>_cu_<8 hex>[_<digits>], cut by its own length prefix (the
# trailing digits vary from one compilation to the next).
ANON_START = re.compile(r"(\d+)_GLOBAL__N__")


def without_anon(text):
    """`text` with each anonymous namespace's name (and its length prefix) replaced by ANON."""
    out, pos = [], 0
    for m in ANON_START.finditer(text):
        if m.start() < pos:
            continue
        out.append(text[pos:m.start()] + "ANON")
        pos = m.start() + len(m.group(1)) + int(m.group(1))
    out.append(text[pos:])
    return "".join(out)


ADDRESS = re.compile(r"/\*[0-9a-f]{4,}\*/")
FUNCTION = re.compile(r"\s*Function : (\S+)")


def kernels(path):
    """{normalised name: [instruction text of each copy]} of a cuobjdump -sass listing."""
    found, name, lines = {}, None, []
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            m = FUNCTION.match(line)
            if m:
                if name is not None:
                    found.setdefault(name, []).append("".join(lines))
                name, lines = without_anon(m.group(1)), []
            elif name is not None:
                lines.append(without_anon(ADDRESS.sub("", line)))
    if name is not None:
        found.setdefault(name, []).append("".join(lines))
    return found


def main():
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    old, new = kernels(sys.argv[1]), kernels(sys.argv[2])
    count = sum(len(v) for v in old.values())
    print(f"kernels: {count} before, {sum(len(v) for v in new.values())} after")
    only_old, only_new = sorted(set(old) - set(new)), sorted(set(new) - set(old))
    differ = sorted(n for n in set(old) & set(new) if sorted(old[n]) != sorted(new[n]))
    for n in only_old:
        print("  only before:", n)
    for n in only_new:
        print("  only after: ", n)
    for n in differ:
        print("  differs:    ", n)
    print(f"{len(differ)} differ, {len(only_old)} only before, {len(only_new)} only after")
    return 1 if differ or only_old or only_new else 0


if __name__ == "__main__":
    sys.exit(main())
