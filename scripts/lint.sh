#!/usr/bin/env bash
# The lint CI runs, with the tools pre-commit pins (.pre-commit-config.yaml), from Debian or PyPI:
#   scripts/lint.sh [BUILD_DIR]
# clang-format (the checked-in .clang-format) over the C++ and CUDA sources; clang-tidy
# (.clang-tidy) over the host sources of src/ and apps/ with BUILD_DIR's compile_commands.json
# (default build/ci; skipped when there is none) and of bindings/ (configured in BUILD_DIR-python,
# where pybind11 is installed); ruff and codespell (pyproject.toml); trailing
# whitespace and final newlines; the include layering (scripts/check_layers.py); README's
# figures against bench/RESULTS.md (scripts/check_figures.py). Exit status: non-zero if any check
# failed.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
build=${1:-build/ci}
failed=0
run() {  # run NAME COMMAND...: prints the command's complaints, remembers failure
  local name=$1
  shift
  echo "== $name"
  if ! "$@"; then
    echo "!! $name failed"
    failed=1
  fi
}

mapfile -t cxx < <(git ls-files '*.cpp' '*.h' '*.cu' '*.cuh')
run clang-format clang-format --dry-run -Werror "${cxx[@]}"
# tidy BUILD_DIR TOP...: clang-tidy over the .cpp files BUILD_DIR compiles under the folders TOP
# (generated ones excluded), four at a time on each core.
tidy() {
  local -  # pipefail off here: the filters' own status is not the verdict, the last grep is
  set +o pipefail
  local dir=$1
  shift
  local sources
  mapfile -t sources < <(python3 - "$dir/compile_commands.json" "$@" <<'PY'
import json, os, sys
root = os.getcwd()
for entry in json.load(open(sys.argv[1])):
    path = os.path.relpath(entry["file"], root)
    if path.endswith(".cpp") and path.split(os.sep)[0] in sys.argv[2:]:
        print(path)
PY
  )
  printf "%s\n" "${sources[@]}" | sort -u |
    xargs -P "$(nproc)" -n 4 clang-tidy -p "$dir" --quiet 2>&1 |
    grep -v -E "^[0-9]+ warnings? (and [0-9]+ errors? )?generated|^Suppressed|^Use -header-filter" |
    { ! grep -E "(warning|error):" -A3; }
}
if [ -f "$build/compile_commands.json" ]; then
  run clang-tidy tidy "$build" src dev apps
else
  echo "== clang-tidy skipped: no $build/compile_commands.json (configure a preset first)"
fi
# The Python binding's sources: their compile commands from a configure of the module alone
# (nothing is built), where pybind11 is installed.
py_build=$build-python
if pybind11_dir=$(python3 -m pybind11 --cmakedir 2>/dev/null) &&
  cmake -S . -B "$py_build" -G Ninja -DCUDAOPS_BUILD_PYTHON=ON -DCUDAOPS_BUILD_TESTS=OFF \
    -DCUDAOPS_BUILD_BENCH=OFF -DCUDAOPS_BUILD_APPS=OFF -DCMAKE_EXPORT_COMPILE_COMMANDS=ON \
    -DCMAKE_CUDA_ARCHITECTURES=90 -Dpybind11_DIR="$pybind11_dir" > "$py_build.log" 2>&1; then
  run clang-tidy-python tidy "$py_build" bindings
else
  echo "== clang-tidy of bindings/ skipped: no pybind11 to configure the module with (see $py_build.log)"
fi
mapfile -t py < <(git ls-files '*.py')
run ruff ruff check "${py[@]}"
mapfile -t text < <(git ls-files | grep -v -E '\.svg$|^LICENSE$')
run codespell codespell "${text[@]}"
run whitespace python3 scripts/check_whitespace.py
# The include layering: no library file includes the kit, no family another family's files.
run layers python3 scripts/check_layers.py
# Figures in one place: every measured figure README quotes is in bench/RESULTS.md.
run figures python3 scripts/check_figures.py README.md
exit $failed
