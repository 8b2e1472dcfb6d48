#!/usr/bin/env bash
# The examples refuse bad flag values with a one-line message and exit
# status 2 (never an abort or a silent run), --device=cuda without a GPU
# the same way.
#   tests/examples/flags_test.sh BUILD/examples
set -u
dir="$1"
failed=0
expect() {   # expect PROGRAM FLAG MESSAGE
  local out rc
  out="$("$dir/$1" "$2" 2>&1)"
  rc=$?
  if [ "$rc" -ne 2 ] || [[ "$out" != *"$3"* ]]; then
    echo "FAIL: $1 $2: exit $rc, output: $out (expected exit 2 and: $3)"
    failed=1
  else
    echo "ok: $1 $2: $out"
  fi
}
expect train_cnn --epochs=0 "--epochs must be in 1..10000, got 0"
expect train_cnn --batch=5000 "--batch must be in 1..1024, got 5000"
expect train_cnn --lr=nan "--lr must be a finite number in [1e-12, 1e+06], got nan"
expect train_cnn --lr=-1 "--lr must be a finite number in [1e-12, 1e+06], got -1"
expect train_cnn --epochs=abc "--epochs: cannot parse 'abc' as a 64-bit integer"
expect train_cnn --min_accuracy=2 "--min_accuracy must be a finite number in [0, 1], got 2"
expect train_cnn --device=tpu "--device must be cpu or cuda, got 'tpu'"
expect finetune_gpt2 --steps=-1 "--steps must be in 1..10000000, got -1"
expect finetune_gpt2 --lr=nan "--lr must be a finite number in [0, 1e+06], got nan"
expect finetune_gpt2 --seq=0 "--seq must be in 1..65536, got 0"
expect finetune_gpt2 --device=tpu "--device must be cpu or cuda, got 'tpu'"
expect train_gpt --batch=0 "--batch must be in 1..4096, got 0"
expect train_gpt --steps=-1 "--steps must be in 1..100000000, got -1"
expect train_gpt --dropout=1 "--dropout must be in [0, 1), got 1"
expect train_gpt --n_embd=0 "--n_embd must be in 1..16384, got 0"
expect train_mlp --batch=0 "--batch must be in 1..65536, got 0"
expect train_mlp --steps=-1 "--steps must be in 1..100000000, got -1"
expect train_mlp --lr=inf "--lr must be a finite number in [0, 1e+06], got inf"
expect train_lines --seq=1 "--seq must be in [2, 4096]"
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
  for p in train_cnn finetune_gpt2 train_gpt; do expect "$p" --device=cuda "--device=cuda but no usable GPU"; done
fi
exit "$failed"
