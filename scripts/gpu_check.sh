#!/usr/bin/env bash
# The GPU check: run from a clean checkout on a machine with an NVIDIA GPU.
#   scripts/gpu_check.sh [--only cpp|python|bench|debug|sanitize|decode] [LOG_DIR]
#   SANITIZER_TOOL=racecheck SANITIZER_SHARD=0/4 scripts/gpu_check.sh --only sanitize [LOG_DIR]
# C++: configures and builds the `gpu` preset with every core, runs every test (GPU tests and the
# compute-sanitizer memcheck runs included), prints the bench table against the measured copy
# bandwidth and runs the Google Benchmark sweep.
# Python: builds the wheel (release architectures, pip without build isolation, so scikit-build-core
# and pybind11 must be installed), installs it into build/python-site, runs the pytest suite
# (torch, CuPy, JAX and Numba parts each skipped when not importable), the per-call overhead
# bench, the row-wise ops next to torch eager and torch.compile, and the CuPy part of the suite
# under compute-sanitizer memcheck.
# Bench (not part of the default run): the benches and the results table alone, from one build.
# Sanitize (not part of the default run): one compute-sanitizer tool over every GPU test binary,
# one GoogleTest shard of each, so that the whole matrix runs in slices of a bounded session.
# Debug (not part of the default run): builds the `debug` preset with the Python module, runs the
# GPU tests in it, and runs every cuda-gdb session of docs/debugging.md, checking what each shows.
# Everything is written under LOG_DIR (default build/gpu-check): the bench JSON, and RESULTS.md,
# bench/RESULTS.md with this GPU's section regenerated from it (scripts/results_table.py).
# Exit status: non-zero if any step failed. Set CUDAOPS_COMMIT when the
# tree carries no .git (the commit is then read from it); PYTHON picks the interpreter.
set -uo pipefail

only=all
if [ "${1:-}" = "--only" ]; then
  only=$2
  shift 2
fi
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

check_cpp() {
  step configure cmake --preset gpu || return 1
  step build cmake --build --preset gpu -j "$(nproc)" || return 1
  # --output-log keeps every test's own output (which cases ran, which were skipped and why).
  # The sanitizer runs share the GPU; the plain GPU tests take it one at a time (RESOURCE_LOCK).
  step ctest ctest --preset gpu -j "$(nproc)" --timeout 1500 --output-log "$log/ctest-output.log"
  grep -E "tests passed|Skipped|Failed|\(Failed\)|Not Run" "$log/ctest.log" | head -20

  [ -f build/gpu/listings/resources.md ] && cp build/gpu/listings/resources.md "$log/listings.md"
  run_benches
  if [ -x build/gpu/bench/cudaops_bench ]; then
    step gbench build/gpu/bench/cudaops_bench --benchmark_out="$log/gbench.json" \
      --benchmark_out_format=json
  fi
}

# The CLI's benches (JSON for the results table) and the JIT's; needs build/gpu/apps/cudaops.
run_benches() {
  local cli=build/gpu/apps/cudaops
  $cli info | tee "$log/info.txt"
  if ! $cli info --cold-start | sed -n '/^cold start/,$p' | tee "$log/cold-start.txt"; then
    failed=1
  fi
  echo "== bench"
  # Every op `cudaops list` knows, every dtype it takes, at its standard shapes, 256-byte aligned:
  # single calls, then (all but k-means and the IVF build, whose calls are many kernels already) in
  # runs of 20 calls.
  local ops stream_ops
  ops=$($cli list --json | python3 -c 'import json, sys; print(" ".join(o["name"] for o in json.load(sys.stdin)))')
  stream_ops=$(echo "$ops" | tr ' ' '\n' | grep -vE '^(kmeans|ivf_build)$' | tr '\n' ' ')
  echo "ops: $ops"
  # shellcheck disable=SC2086 # the op names are words
  if ! $cli bench $ops --offsets 0 --json --no-progress --svg "$log/bench.svg" \
      > "$log/bench.json" 2> "$log/bench.err"; then
    tail -20 "$log/bench.err"
    failed=1
  fi
  # shellcheck disable=SC2086
  if ! $cli bench $stream_ops --offsets 0 --calls 20 --json --no-progress \
      > "$log/bench-stream.json" 2> "$log/bench-stream.err"; then
    tail -20 "$log/bench-stream.err"
    failed=1
  fi
  echo "== jit"
  if ! python3 bench/jit_cache.py "$cli" | tee "$log/jit.md"; then failed=1; fi
}

# The Python benches (torch side by side, per-call host cost) with the module at PYTHONPATH $1.
run_python_benches() {
  local py=${PYTHON:-python3}
  # Top-k's C++ times come from the CLI where the C++ part has built it.
  local cli_args=()
  [ -x build/gpu/apps/cudaops ] && cli_args=(--cli build/gpu/apps/cudaops)
  PYTHONPATH=$1 step overhead "$py" bench/python_overhead.py "${cli_args[@]}"
  cp "$log/overhead.log" "$log/python_overhead.md"
  PYTHONPATH=$1 step rowwise-torch "$py" bench/rowwise_torch.py
  cp "$log/rowwise-torch.log" "$log/rowwise_torch.md"
  PYTHONPATH=$1 step topk-torch "$py" bench/topk_torch.py
  cp "$log/topk-torch.log" "$log/topk_torch.md"
  PYTHONPATH=$1 step kmeans-torch "$py" bench/kmeans_torch.py
  cp "$log/kmeans-torch.log" "$log/kmeans_torch.md"
  PYTHONPATH=$1 step ivf-torch "$py" bench/ivf_torch.py
  cp "$log/ivf-torch.log" "$log/ivf_torch.md"
}

# The benches alone, for a results table: the CLI and the module from one `gpu` build tree.
check_bench() {
  local py=${PYTHON:-python3}
  local pybind_dir
  pybind_dir=$("$py" -m pybind11 --cmakedir 2>/dev/null)
  step configure cmake --preset gpu -DCUDAOPS_BUILD_PYTHON=ON \
    -DPython_EXECUTABLE="$(command -v "$py")" ${pybind_dir:+-Dpybind11_DIR=$pybind_dir} || return 1
  step build cmake --build --preset gpu -j "$(nproc)" --target cudaops_cli _core || return 1
  run_benches
  run_python_benches "$root/build/gpu/bindings/python"
}

check_python() {
  local py=${PYTHON:-python3}
  local site=$root/build/python-site
  rm -rf build/python-wheel "$site"
  step wheel "$py" -m pip wheel --no-build-isolation --no-deps -w build/python-wheel \
    -Cbuild-dir=build/python . || return 1
  step install "$py" -m pip install --no-deps --target "$site" build/python-wheel/*.whl || return 1
  if command -v cuobjdump > /dev/null; then
    cuobjdump --list-elf "$site"/cudaops/_core*.so | sed 's/.*\.\(sm_[0-9a-z]*\)\..*/\1/' |
      sort | uniq -c > "$log/wheel-sass.txt"
    cuobjdump --list-ptx "$site"/cudaops/_core*.so | sed 's/.*\.\(sm_[0-9a-z]*\)\..*/\1/' |
      sort | uniq -c > "$log/wheel-ptx.txt"
  fi
  ldd "$site"/cudaops/_core*.so > "$log/wheel-ldd.txt"
  PYTHONPATH=$site step pytest "$py" -m pytest test/python -v -rs -p no:cacheprovider
  grep -E "passed|failed" "$log/pytest.log" | tail -1
  run_python_benches "$site"
  if command -v compute-sanitizer > /dev/null; then
    PYTHONPATH=$site step py-memcheck compute-sanitizer --tool memcheck --error-exitcode 1 \
      "$py" -m pytest test/python/test_gpu_frameworks.py -q -p no:cacheprovider -k cupy
  fi
}

# expect NAME REGEX COMMAND...: a step whose log must also match REGEX (grep -E).
expect() {
  local name=$1 regex=$2
  shift 2
  step "$name" "$@" || return 1
  if ! grep -Eq "$regex" "$log/$name.log"; then
    echo "!! $name: the log does not show /$regex/"
    failed=1
    return 1
  fi
}

check_debug() {
  local py=${PYTHON:-python3}
  local pybind_dir
  pybind_dir=$("$py" -m pybind11 --cmakedir 2>/dev/null)
  step debug-configure cmake --preset debug -DCUDAOPS_BUILD_PYTHON=ON \
    -DPython_EXECUTABLE="$(command -v "$py")" ${pybind_dir:+-Dpybind11_DIR=$pybind_dir} || return 1
  step debug-build cmake --build --preset debug -j "$(nproc)" || return 1
  step debug-ctest ctest --preset debug -L gpu -LE sanitizer --timeout 1800 \
    --output-log "$log/debug-ctest-output.log"
  grep -E "tests passed|Failed|\(Failed\)" "$log/debug-ctest.log" | head -5
  command -v cuda-gdb > /dev/null || { echo "!! cuda-gdb not found"; failed=1; return 1; }
  # The guide's sessions: each must stop in our kernel and show its state.
  expect debug-gdb-cli "CUDA thread hit Breakpoint 1.*elementwise_vec_kernel" \
    cuda-gdb -batch -x docs/debugging/cli_kernel.gdb \
    --args build/debug/apps/cudaops run add --n 4099 --iters 1 --warmup 0
  grep -E "hit Breakpoint|Switching focus|^\\$[0-9]+ =" "$log/debug-gdb-cli.log" | head -6
  expect debug-gdb-test "CUDA thread hit Breakpoint 1.*topk_values_kernel" \
    cuda-gdb -batch -x docs/debugging/test_kernel.gdb \
    --args build/debug/test/cudaops_gpu_topk_tests \
    --gtest_filter=All/TopkShapes.MatchesReference/8
  grep -E "hit Breakpoint|Switching focus|^\\$[0-9]+ =" "$log/debug-gdb-test.log" | head -6
  # The guide's sanitizer and launch-blocking commands.
  local cli=build/debug/apps/cudaops
  expect debug-memcheck "ERROR SUMMARY: 0 errors" compute-sanitizer --tool memcheck \
    --leak-check full $cli run softmax --rows 7 --cols 199 --check --iters 2 --warmup 1
  expect debug-racecheck "RACECHECK SUMMARY: 0 hazards" compute-sanitizer --tool racecheck \
    build/debug/test/cudaops_gpu_topk_tests --gtest_filter='All/TopkShapes.MatchesReference/1*'
  expect debug-initcheck "ERROR SUMMARY: 0 errors" compute-sanitizer --tool initcheck \
    $cli run layer_norm --rows 5 --cols 1000 --check --iters 2 --warmup 1
  PYTHONPATH=$root/build/debug/bindings/python expect debug-synccheck "ERROR SUMMARY: 0 errors" \
    compute-sanitizer --tool synccheck "$py" -m pytest test/python/test_topk.py -q \
    -p no:cacheprovider
  CUDA_LAUNCH_BLOCKING=1 expect debug-launch-blocking "check: ok" $cli run add --n 1000 --check
  PYTHONPATH=$root/build/debug/bindings/python "$py" docs/debugging/python_loop.py 120 \
    > "$log/debug-python-loop.log" 2>&1 &
  local loop=$!
  local pid=""
  for _ in $(seq 100); do
    pid=$(head -1 "$log/debug-python-loop.log" 2>/dev/null | grep -E "^[0-9]+$")
    [ -n "$pid" ] && break
    sleep 0.2
  done
  if [ -n "$pid" ]; then
    expect debug-gdb-python "Switching focus to CUDA kernel|softmax" \
      cuda-gdb -batch -x docs/debugging/python_attach.gdb -p "$pid"
    grep -E "Switching focus|softmax|Detaching" "$log/debug-gdb-python.log" | head -5
  else
    echo "!! the Python loop did not start (see debug-python-loop.log)"
    failed=1
  fi
  kill "$loop" 2> /dev/null
  wait "$loop" 2> /dev/null || true  # the loop killed: not a failure (failed= records those)
}

# The decode step and the index's Python side alone, for a bounded session: the CLI, the index's
# and the decode attention's GPU tests (memcheck and racecheck of the attention's), --check from
# the CLI, the module in the same tree with the Python tests of the index, the torch ops and the
# ranks (gloo, two processes on one GPU), and the decode bench at both context lengths
# (LOG_DIR/decode_attention.md for results_table.py --extra).
check_decode() {
  local py=${PYTHON:-python3} pybind_dir
  pybind_dir=$("$py" -m pybind11 --cmakedir 2>/dev/null)
  step configure cmake --preset gpu -DCUDAOPS_BUILD_BENCH=OFF -DCUDAOPS_BUILD_PYTHON=ON \
    -DPython_EXECUTABLE="$(command -v "$py")" ${pybind_dir:+-Dpybind11_DIR=$pybind_dir} || return 1
  step build cmake --build --preset gpu -j "$(nproc)" --target cudaops_cli \
    cudaops_gpu_ivf_tests cudaops_gpu_ivf_attention_tests _core || return 1
  local tests=build/gpu/test cli=build/gpu/apps/cudaops
  step attention-gpu "$tests/cudaops_gpu_ivf_attention_tests"
  step ivf-gpu "$tests/cudaops_gpu_ivf_tests"
  step attention-memcheck compute-sanitizer --tool memcheck --error-exitcode 1 \
    "$tests/cudaops_gpu_ivf_attention_tests"
  step attention-racecheck compute-sanitizer --tool racecheck --error-exitcode 1 \
    "$tests/cudaops_gpu_ivf_attention_tests" --gtest_filter='All/*'
  expect attention-check "check: ok" "$cli" run ivf_attention --dtype bfloat16 --seq 16384 \
    --clusters 1024 --segments 4 --n_probe 30 --n_estimate 200 --queries 2 --check
  if ! "$cli" bench ivf_attention attention_merge --offsets 0 --json --no-progress \
      > "$log/bench-decode.json" 2> "$log/bench-decode.err"; then
    tail -20 "$log/bench-decode.err"
    failed=1
  fi
  # float32 k-means, exact products beside TF32 ones (the same shapes, precision=1 rows).
  if ! "$cli" bench kmeans --dtype float32 --offsets 0 --json --no-progress \
      > "$log/bench-kmeans-f32.json" 2> "$log/bench-kmeans-f32.err"; then
    tail -20 "$log/bench-kmeans-f32.err"
    failed=1
  fi
  # Each kernel of one decode step at the bench's shape (131072 tokens, 8192 clusters), by ncu:
  # where the step's time goes (ranking, the two selections, the split, the merge).
  if command -v ncu > /dev/null; then
    step decode-kernels ncu --csv --metrics gpu__time_duration.sum \
      --kernel-name regex:'cluster_scores|softmax_stats|group_scores|probes_kernel|attention_' \
      --launch-count 14 "$cli" run ivf_attention --dtype float16 --warmup 1 --iters 1
  fi
  PYTHONPATH=$root/build/gpu/bindings/python step pytest-decode "$py" -m pytest \
    test/python/test_ivf.py test/python/test_torch_ops.py test/python/test_distributed.py \
    -q -rs -p no:cacheprovider
  PYTHONPATH=$root/build/gpu/bindings/python step decode-bench "$py" bench/decode_attention.py \
    --models llm gaussian --tokens 131072 1048576 --json "$log/decode.json" \
    --markdown "$log/decode_attention.md"
}

# One compute-sanitizer tool over every GPU test binary (ctest label sanitizer.TOOL), in slices
# that fit a bounded session: SHARD is INDEX/COUNT of GoogleTest's sharding (each binary runs
# the cases of that shard). Appends a line to LOG_DIR/sanitizers.md: date, commit, tool, shard,
# ctest's verdict, for the results.
check_sanitizer() {
  local tool=$1 shard=${2:-0/1}
  step configure cmake --preset gpu || return 1
  step build cmake --build --preset gpu -j "$(nproc)" || return 1
  local name="sanitize-$tool-${shard/\//-of-}"
  GTEST_SHARD_INDEX=${shard%/*} GTEST_TOTAL_SHARDS=${shard#*/} \
    step "$name" ctest --preset gpu -L "sanitizer\.$tool" -j 4 --timeout 1500 \
    --output-log "$log/$name-output.log"
  local status=$?
  echo "- $(date -u +%Y-%m-%d) $(git rev-parse --short HEAD 2>/dev/null || echo "${CUDAOPS_COMMIT:-?}")" \
    "$tool shard $shard: $(grep -E 'tests passed' "$log/$name.log" | head -1)" >> "$log/sanitizers.md"
  return $status
}

case $only in
  all) check_cpp || failed=1; check_python || failed=1 ;;
  sanitize) check_sanitizer "${SANITIZER_TOOL:?set SANITIZER_TOOL}" "${SANITIZER_SHARD:-0/1}" ||
    failed=1 ;;
  cpp) check_cpp || failed=1 ;;
  python) check_python || failed=1 ;;
  debug) check_debug || failed=1 ;;
  bench) check_bench || failed=1 ;;
  decode) check_decode || failed=1 ;;
  *) echo "--only takes cpp, python, bench, debug, sanitize or decode" >&2; exit 2 ;;
esac
if [ ! -f "$log/info.txt" ] && command -v nvidia-smi > /dev/null; then
  echo "device 0: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" > "$log/info.txt"
fi

# With two or more devices, what the several-GPU tests did, for the results.
if [ "$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')" -ge 2 ]; then
  {
    echo "Several GPUs in one process ($(nvidia-smi -L | grep -c '^GPU ') devices):"
    echo
    grep -E "Test +#[0-9]+: .*multi_device" "$log/ctest.log" 2>/dev/null | sed 's/^ *[0-9]*\/[0-9]* Test *#[0-9]*: /- /'
    grep -E "test_multi_gpu.py::" "$log/pytest.log" 2>/dev/null | sed 's/^/- /; s/ *\[ *[0-9]*%\]//'
    echo
  } > "$log/multi_gpu.md"
fi

commit=${CUDAOPS_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
device=$(sed -n 's/^device 0: //p' "$log/info.txt" | sed 's/ (.*//')
# bench/RESULTS.md with this GPU's section regenerated from the JSON (copy it into the tree).
if [ -f "$log/bench.json" ]; then
  rm -f "$log/RESULTS.md"
  [ -f bench/RESULTS.md ] && cp bench/RESULTS.md "$log/RESULTS.md"
  extras=()
  for f in python_overhead rowwise_torch topk_torch kmeans_torch ivf_torch decode_attention jit \
    multi_gpu; do
    [ -s "$log/$f.md" ] && extras+=("$log/$f.md")
  done
  stream_arg=()
  [ -s "$log/bench-stream.json" ] && stream_arg=(--stream "$log/bench-stream.json")
  if python3 scripts/results_table.py --device "${device:-unknown device}" --commit "$commit" \
      --date "$(date -u +%Y-%m-%d)" --bench "$log/bench.json" "${stream_arg[@]}" \
      --extra "${extras[@]}" --results "$log/RESULTS.md"; then
    echo "== wrote $log/RESULTS.md (copy it to bench/RESULTS.md)"
  else
    failed=1
  fi
elif [ "$only" = decode ] && [ -s "$log/bench-decode.json" ]; then
  # No whole bench: the decode run's tables and figures added to this GPU's section as it stands.
  rm -f "$log/RESULTS.md"
  cp bench/RESULTS.md "$log/RESULTS.md"
  today=$(date -u +%Y-%m-%d)
  args=(--table "=$log/bench-decode.json@$commit@$today")
  [ -s "$log/bench-kmeans-f32.json" ] &&
    args+=(--table " (float32 products)=$log/bench-kmeans-f32.json@$commit@$today")
  [ -s "$log/decode_attention.md" ] && args+=(--extra "$log/decode_attention.md")
  if python3 scripts/results_table.py --device "${device:-unknown device}" --amend "${args[@]}" \
      --results "$log/RESULTS.md"; then
    echo "== wrote $log/RESULTS.md (copy it to bench/RESULTS.md)"
  else
    failed=1
  fi
fi
{
  echo "ctest: $(grep -E 'tests passed' "$log/ctest.log" 2>/dev/null || echo 'not run')"
  echo "pytest: $(grep -E '(passed|failed)' "$log/pytest.log" 2>/dev/null | tail -1)"
  echo '```'
  sed -n '/kernel family/,$p' "$log/info.txt" 2>/dev/null
  cat "$log/cold-start.txt" 2>/dev/null
  echo '```'
} > "$log/summary.md"
exit $failed
