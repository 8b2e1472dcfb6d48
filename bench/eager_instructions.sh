#!/usr/bin/env bash
# Instructions per eager op, from two callgrind runs (n and 2n iterations):
# (I(2n) - I(n)) / n removes start-up and one-off costs exactly.
#   bench/eager_instructions.sh [build-dir]
set -euo pipefail
build=${1:-build}
n=2000
command -v valgrind >/dev/null || { echo "eager_instructions.sh: valgrind is not installed" >&2; exit 1; }
[ -x "$build/bench/eager_count" ] || { echo "eager_instructions.sh: no $build/bench/eager_count" >&2; exit 1; }
# callgrind's total for one run; fails (with callgrind's output) when it printed none.
count() {
  local out total
  out="$(valgrind --tool=callgrind --callgrind-out-file=/dev/null "$build/bench/eager_count" "$1" "$2" 2>&1)" || {
    echo "eager_instructions.sh: eager_count $1 $2 failed under callgrind:" >&2
    echo "$out" >&2
    return 1
  }
  total="$(sed -n 's/.*Collected : \([0-9]*\).*/\1/p' <<<"$out")"
  if [ -z "$total" ]; then
    echo "eager_instructions.sh: no instruction count in callgrind's output:" >&2
    echo "$out" >&2
    return 1
  fi
  echo "$total"
}
for w in add_nograd add_grad chain; do
  i1=$(OMP_NUM_THREADS=1 count "$w" "$n")
  i2=$(OMP_NUM_THREADS=1 count "$w" $((2 * n)))
  echo "$w: $(( (i2 - i1) / n )) instructions per iteration"
done
