#!/usr/bin/env bash
# The lint CI runs, with the tools pre-commit pins (.pre-commit-config.yaml), from Debian or PyPI:
#   scripts/lint.sh [BUILD_DIR]
# clang-format (the checked-in .clang-format) over the C++ and CUDA sources; clang-tidy
# (.clang-tidy) over the host sources of src/ and apps/ with BUILD_DIR's compile_commands.json
# (default build/ci; skipped when there is none); ruff and codespell (pyproject.toml); trailing
# whitespace and final newlines. Exit status: non-zero if any check failed.
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
if [ -f "$build/compile_commands.json" ]; then
  # The host sources the build compiles (generated ones excluded), two at a time per core.
  mapfile -t host < <(python3 - "$build/compile_commands.json" <<'PY'
import json, os, sys
root = os.getcwd()
for entry in json.load(open(sys.argv[1])):
    path = os.path.relpath(entry["file"], root)
    if path.endswith(".cpp") and path.split(os.sep)[0] in ("src", "apps"):
        print(path)
PY
  )
  run clang-tidy bash -c 'printf "%s\n" "$@" | sort -u |
    xargs -P "$(nproc)" -n 4 clang-tidy -p "'"$build"'" --quiet 2>&1 |
    grep -v -E "^[0-9]+ warnings? (and [0-9]+ errors? )?generated|^Suppressed|^Use -header-filter" |
    { ! grep -E "(warning|error):" -A3; }' _ "${host[@]}"
else
  echo "== clang-tidy skipped: no $build/compile_commands.json (configure a preset first)"
fi
mapfile -t py < <(git ls-files '*.py')
run ruff ruff check "${py[@]}"
mapfile -t text < <(git ls-files | grep -v -E '\.svg$|^LICENSE$')
run codespell codespell "${text[@]}"
run whitespace python3 scripts/check_whitespace.py
exit $failed
