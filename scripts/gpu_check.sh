#!/usr/bin/env bash
# The GPU check: run from a clean checkout on a machine with an NVIDIA GPU.
#   scripts/gpu_check.sh [LOG_DIR]
# Configures and builds the `gpu` preset with every core, runs every test (GPU tests and the
# compute-sanitizer memcheck runs included), prints the bench table against the measured copy
# bandwidth, and writes everything under LOG_DIR (default build/gpu-check):
#   configure.log build.log ctest.log ctest-output.log info.txt bench.md gbench.json RESULTS.md
# RESULTS.md is the section to record in bench/RESULTS.md. Exit status: non-zero if any step
# failed. Set CUDAOPS_COMMIT when the tree carries no .git (the commit is then read from it).
set -uo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
log=${1:-$root/build/gpu-check}
mkdir -p "$log"
cd "$root" || exit 1
failed=0
step() {  # step NAME COMMAND...: runs, logs to $log/NAME.log, remembers failure
  local name=$1
  shift
  echo "== $name: $*"
  if ! "$@" > "$log/$name.log" 2>&1; then
    echo "!! $name failed (see $name.log)"
    tail -n 40 "$log/$name.log"
    failed=1
    return 1
  fi
  tail -n 5 "$log/$name.log"
}

step configure cmake --preset gpu || exit 1
step build cmake --build --preset gpu -j "$(nproc)" || exit 1
# --output-log keeps every test's own output (which cases ran, which were skipped and why).
step ctest ctest --preset gpu -j 4 --timeout 1200 --output-log "$log/ctest-output.log"
grep -E "tests passed|Skipped|Failed|\(Failed\)|Not Run" "$log/ctest.log" | head -20

cli=build/gpu/apps/cudaops
$cli info | tee "$log/info.txt"
echo "== bench"
if ! $cli bench --check --markdown | tee "$log/bench.md"; then failed=1; fi
if [ -x build/gpu/bench/cudaops_bench ]; then
  step gbench build/gpu/bench/cudaops_bench --benchmark_out="$log/gbench.json" \
    --benchmark_out_format=json
fi

commit=${CUDAOPS_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
device=$(sed -n 's/^device 0: //p' "$log/info.txt")
{
  echo "## $(date -u +%Y-%m-%d) · ${device:-unknown device} · commit $commit"
  echo
  echo "ctest: $(grep -E 'tests passed' "$log/ctest.log" || echo 'no summary')"
  echo
  cat "$log/bench.md"
} > "$log/RESULTS.md"
echo "== wrote $log/RESULTS.md"
exit $failed
