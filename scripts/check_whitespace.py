#!/usr/bin/env python3
"""Trailing whitespace and a missing final newline in the tracked text files (what pre-commit's
trailing-whitespace and end-of-file-fixer hooks fix), for CI, which has no network for pre-commit.
Prints each offence; exits 1 if there is any."""

import subprocess
import sys

SKIP_SUFFIXES = (".svg", ".png", ".jpg")


def main():
    files = subprocess.run(["git", "ls-files"], capture_output=True, text=True,
                           check=True).stdout.split()
    bad = 0
    for name in files:
        if name.endswith(SKIP_SUFFIXES):
            continue
        try:
            data = open(name, "rb").read()
        except (IsADirectoryError, FileNotFoundError):
            continue
        if b"\0" in data:
            continue  # binary
        for number, line in enumerate(data.split(b"\n"), 1):
            if line.rstrip(b"\r").endswith((b" ", b"\t")):
                print(f"{name}:{number}: trailing whitespace")
                bad += 1
        if data and not data.endswith(b"\n"):
            print(f"{name}: no newline at the end")
            bad += 1
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
