#!/usr/bin/env bash
# examples/train_cnn refuses bad flag values with a one-line message and exit
# status 2 (never an abort), and --device=cuda without a GPU the same way.
#   tests/examples/train_cnn_flags_test.sh BUILD/examples/train_cnn
set -u
bin="$1"
failed=0
expect() {   # expect FLAG MESSAGE
  local out rc
  out="$("$bin" "$1" 2>&1)"
  rc=$?
  if [ "$rc" -ne 2 ] || [[ "$out" != *"$2"* ]]; then
    echo "FAIL: $1: exit $rc, output: $out (expected exit 2 and: $2)"
    failed=1
  else
    echo "ok: $1: $out"
  fi
}
expect --epochs=0 "--epochs must be in 1..10000, got 0"
expect --batch=5000 "--batch must be in 1..1024, got 5000"
expect --lr=nan "--lr must be finite and positive, got nan"
expect --lr=-1 "--lr must be finite and positive, got -1"
expect --min_accuracy=2 "--min_accuracy must be in [0, 1], got 2"
expect --device=tpu "--device must be cpu or cuda, got 'tpu'"
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
  expect --device=cuda "--device=cuda but no usable GPU"
fi
exit "$failed"
