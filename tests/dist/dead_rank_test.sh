#!/usr/bin/env bash
# A rank that dies ends the job within a bounded time (issue 22, faults):
# runs DistDeadRankTest under `mpirun -np 2`, where rank 1 exits abruptly
# while rank 0 waits in an all-reduce (timeout 20 s). Passes when the job
# ends with a failure status within 60 s and rank 0's all-reduce never
# reported success; fails on a hang (the timeout below) or a zero status.
#
#   tests/dist/dead_rank_test.sh MPIRUN TEST_BINARY
set -u
mpirun="$1"
binary="$2"
start=$SECONDS
out="$(ENCORE_DIST_DEAD_RANK=1 timeout -k 5 60 "$mpirun" -np 2 --allow-run-as-root --oversubscribe \
  -x ENCORE_DIST_DEAD_RANK -x OMP_NUM_THREADS "$binary" --gtest_filter='DistDeadRankTest.*' 2>&1)"
rc=$?
elapsed=$((SECONDS - start))
echo "$out" | tail -n 25
echo "exit status $rc after ${elapsed} s"
if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
  echo "FAIL: the job hung past 60 s after a rank died"
  exit 1
fi
if [ "$rc" -eq 0 ]; then
  echo "FAIL: the job succeeded although a rank died"
  exit 1
fi
if echo "$out" | grep -q "all-reduce with a dead peer returned"; then
  echo "FAIL: rank 0's all-reduce returned without its peer"
  exit 1
fi
echo "OK: the job ended with status $rc within ${elapsed} s"
