#!/usr/bin/env bash
# Times two builds of the CLI side by side on one GPU, interleaved in rounds, so that a change is
# measured beside what it changes in the same run.
#   scripts/ab_compare.sh BASE CASES [ROUNDS]
# BASE: a source tree, or a .tar.gz of one (`git archive REV | gzip > base.tar.gz`), to compare
# with this tree. Both are configured with the `gpu` preset and their CLIs built at once, half the
# cores each (nothing is rebuilt that is up to date). CASES: a file of lines
#   label | VAR=value ... | cudaops run arguments
# (the middle field may be empty; blank lines and lines starting with # are skipped). Prints, per
# round, each case's median time of each build (`cudaops run`'s `time:` line), base first.
# Exit status: non-zero if a build failed or a case printed no time.
set -uo pipefail

if [ $# -lt 2 ]; then
  sed -n '2,11p' "$0"
  exit 2
fi
base=$(realpath "$1") || exit 2
cases=$(realpath "$2") || exit 2
rounds=${3:-2}
[ -r "$cases" ] || { echo "no cases file $cases"; exit 2; }
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root" || exit 1
if [ -f "$base" ]; then
  dir=$root/build/ab-base
  rm -rf "$dir"
  mkdir -p "$dir"
  tar xzf "$base" -C "$dir" || exit 1
  base=$dir
fi
half=$(($(nproc) / 2))
half=$((half > 0 ? half : 1))
build() {  # build SOURCE_DIR LOG
  (cd "$1" && cmake --preset gpu && cmake --build --preset gpu -j "$half" --target cudaops_cli) \
    > "$2" 2>&1
}
build "$base" "$root/build/ab-base.log" &
base_pid=$!
build "$root" "$root/build/ab-new.log" &
new_pid=$!
failed=0
wait "$base_pid" || { echo "!! the base build failed: build/ab-base.log"; failed=1; }
wait "$new_pid" || { echo "!! this tree's build failed: build/ab-new.log"; failed=1; }
[ "$failed" = 0 ] || exit 1

bins=("$base/build/gpu/apps/cudaops" "$root/build/gpu/apps/cudaops")
names=(base new)
for ((r = 1; r <= rounds; ++r)); do
  echo "== round $r"
  while IFS='|' read -r label vars args; do
    label=$(echo "$label" | xargs)
    [ -z "$label" ] && continue
    case $label in \#*) continue ;; esac
    line=$(printf '%-24s' "$label")
    for i in 0 1; do
      # shellcheck disable=SC2086  # the variables and arguments split on spaces
      t=$(env $vars "${bins[$i]}" run $args 2>&1 | sed -n 's/.*time: *\([0-9.]*\) us.*/\1/p')
      [ -z "$t" ] && { t="-"; failed=1; }
      line="$line  ${names[$i]} $(printf '%12s' "$t")"
    done
    echo "$line"
  done < "$cases"
done
exit "$failed"
