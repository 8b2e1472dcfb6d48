#!/usr/bin/env bash
# The examples refuse bad flag values with a one-line message and exit
# status 2 (never an abort or a silent run), --device=cuda without a GPU
# the same way.
#   tests/examples/flags_test.sh BUILD/examples
set -u
dir="$1"
failed=0
expect_exit() {   # expect_exit STATUS PROGRAM FLAG MESSAGE
  local out rc
  out="$("$dir/$2" "$3" 2>&1)"
  rc=$?
  if [ "$rc" -ne "$1" ] || [[ "$out" != *"$4"* ]]; then
    echo "FAIL: $2 $3: exit $rc, output: $out (expected exit $1 and: $4)"
    failed=1
  else
    echo "ok: $2 $3: $out"
  fi
}
expect() { expect_exit 2 "$@"; }   # expect PROGRAM FLAG MESSAGE: a bad flag
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

# Input files are hostile input (examples/text_file.h): one line and exit
# status 1 for an endless file, a directory or a truncated gzip. They were
# read until memory ran out (abort), or trained on the truncated part.
expect_input() { expect_exit 1 "$@"; }   # expect_input PROGRAM FLAG MESSAGE
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for i in $(seq 1 400); do
  row=""
  for p in $(seq 1 64); do row+="$(( (i * 7 + p * 13) % 17 )),"; done
  echo "${row}$(( i % 10 ))"
done | gzip -c > "$tmp/digits.csv.gz"
size=$(stat -c %s "$tmp/digits.csv.gz")
head -c $(( size / 2 )) "$tmp/digits.csv.gz" > "$tmp/truncated.csv.gz"
expect_input train_cnn "--data=$tmp/truncated.csv.gz" "truncated gzip"
expect_input train_gpt --text=/dev/zero "holds more than 64 MiB of text"
expect_input train_gpt "--text=$tmp" "is a directory"
expect_input train_lines --text=/dev/zero "holds more than 64 MiB of text"
exit "$failed"
