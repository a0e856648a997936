#!/usr/bin/env bash
# Compiles every library CUDA source for the oldest and the newest architecture of the release
# list (CUDAOPS_RELEASE_ARCHITECTURES in CMakeLists.txt) with the flags BUILD_DIR was configured
# with (its compile_commands.json), the device code unoptimised (cicc and ptxas at -O0: about two
# minutes on two cores, a third of optimised) and the objects thrown away. An instruction one
# end of the list lacks (cp.async or bfloat16 products on sm_75) fails here, where a build for
# one architecture would not see it.
#   scripts/check_arch_range.sh BUILD_DIR
set -euo pipefail
build=${1:?usage: scripts/check_arch_range.sh BUILD_DIR}
root=$(cd "$(dirname "$0")/.." && pwd)
python3 - "$build" "$root" <<'PY'
import concurrent.futures
import json
import os
import pathlib
import re
import shlex
import subprocess
import sys

build, root = pathlib.Path(sys.argv[1]).resolve(), pathlib.Path(sys.argv[2])
listed = re.search(r'set\(CUDAOPS_RELEASE_ARCHITECTURES\s+"([^"]+)"',
                   (root / "CMakeLists.txt").read_text())
if not listed:
    sys.exit("CUDAOPS_RELEASE_ARCHITECTURES not found in CMakeLists.txt")
numbers = sorted({int(re.match(r"\d+", a).group()) for a in listed.group(1).split(";")})
ends = [numbers[0], numbers[-1]]

jobs = []
for entry in json.loads((build / "compile_commands.json").read_text()):
    source = entry["file"]
    # The sm_90a objects are built for that one architecture whatever the list says.
    if not source.endswith(".cu") or "/src/" not in source or source.endswith("_sm90a.cu"):
        continue
    args, drop = [], False
    for a in shlex.split(entry["command"]):
        if drop:
            drop = False
        elif a == "-o":
            drop = True
        elif not a.startswith(("--generate-code", "-gencode", "-arch")):
            args.append(a)
    for arch in ends:
        code = f"--generate-code=arch=compute_{arch},code=[sm_{arch}]"
        jobs.append((source, arch, entry["directory"],
                     args + [code, "-Xcicc", "-O0", "-Xptxas", "-O0", "-o", os.devnull]))


def compile_one(job):
    source, arch, directory, command = job
    done = subprocess.run(command, cwd=directory, capture_output=True, text=True)
    return source, arch, done.returncode, done.stdout + done.stderr


failed = 0
with concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
    for source, arch, code, output in pool.map(compile_one, jobs):
        name = os.path.relpath(source, root)
        if code != 0:
            failed += 1
            print(f"FAILED sm_{arch} {name}\n{output.strip()[:4000]}")
        else:
            print(f"ok sm_{arch} {name}")
print(f"{len(jobs) - failed} of {len(jobs)} compiles passed (sm_{ends[0]} and sm_{ends[1]})")
sys.exit(1 if failed else 0)
PY
