#!/usr/bin/env bash
# Instructions per eager op, from two callgrind runs (n and 2n iterations):
# (I(2n) - I(n)) / n removes start-up and one-off costs exactly.
#   bench/eager_instructions.sh [build-dir]
set -euo pipefail
build=${1:-build}
n=2000
count() {
  valgrind --tool=callgrind --callgrind-out-file=/dev/null "$build/bench/eager_count" "$1" "$2" 2>&1 |
    sed -n 's/.*Collected : \([0-9]*\).*/\1/p'
}
for w in add_nograd add_grad chain; do
  i1=$(OMP_NUM_THREADS=1 count "$w" "$n")
  i2=$(OMP_NUM_THREADS=1 count "$w" $((2 * n)))
  echo "$w: $(( (i2 - i1) / n )) instructions per iteration"
done
