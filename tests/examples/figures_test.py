#!/usr/bin/env python3
"""The examples' printed figures are what they measure.

  tests/examples/figures_test.py BUILD/examples DIGITS_CSV_GZ

- train_gpt --json ends with one line of strict JSON, also when a figure was
  not measured (no replay in lockstep with the eager steps, or no eager
  steps): that figure is null, and the text says so instead of printing
  "inf" or "nan" (review finding, 2026-12-07: --steps=3 printed
  "speedup infx" and a JSON line with inf, which no JSON parser reads).
- train_mlp's ms/step is the time of the steps since the last line: over a
  run of fewer than 100 steps, times the steps, it is most of the run's wall
  time (review finding, 2026-12-07: it always divided by 100, so a 40-step
  run printed 0.4 of its real step time, and the last line of a run that
  is not a multiple of 100 too little).
- train_cnn prints no eager / replay ratio when no plain replay ran (review
  finding, 2026-12-07: a three-step run divided by a floor of 1e-9 ms and
  printed a speedup of billions).
"""
import json
import re
import subprocess
import sys
import time

failures = []


def check(ok, what):
    print(("ok: " if ok else "FAIL: ") + what)
    if not ok:
        failures.append(what)


def run(program, *args):
    t0 = time.monotonic()
    p = subprocess.run([program, *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=300)
    return p.returncode, p.stdout, time.monotonic() - t0


def strict_json(line):
    def refuse(name):
        raise ValueError("not JSON: " + name)
    return json.loads(line, parse_constant=refuse)


def check_gpt_json(examples, args, unmeasured):
    rc, out, _ = run(f"{examples}/train_gpt", "--sample_chars=0", "--json", *args)
    what = "train_gpt " + " ".join(args)
    check(rc == 0, f"{what}: exit status {rc}")
    last = out.strip().splitlines()[-1] if out.strip() else ""
    try:
        figures = strict_json(last)
    except ValueError as e:
        check(False, f"{what}: last line is not JSON ({e}): {last}")
        return
    for key in unmeasured:
        check(figures.get(key, "missing") is None, f"{what}: {key} is null when not measured: {figures.get(key)}")
    check(figures.get("speedup", "missing") is None, f"{what}: speedup is null: {figures.get('speedup')}")
    check(figures.get("loss_first", 0) > 0, f"{what}: loss_first is the first step's loss: {figures.get('loss_first')}")
    text = out[: out.rfind(last)]
    bad = re.search(r"\b(-?nan|inf)\b", text) is not None
    check(not bad, f"{what}: no inf or nan in the text" + (f":\n{text}" if bad else ""))


def check_mlp_step_time(examples):
    steps = 40
    rc, out, wall_s = run(f"{examples}/train_mlp", f"--steps={steps}", "--batch=2048", "--hidden=1024",
                          "--target_loss=1000")
    check(rc == 0, f"train_mlp --steps={steps}: exit status {rc}")
    lines = re.findall(r"step +(\d+) .* ([0-9.]+) ms/step", out)
    check(len(lines) == 1 and int(lines[0][0]) == steps, f"train_mlp: one line, at step {steps}: {lines}")
    if not lines:
        return
    printed_s = float(lines[0][1]) * steps / 1e3
    # The steps are most of the program's run (start-up and the held-out batch are the rest).
    check(0.6 * wall_s <= printed_s <= wall_s,
          f"train_mlp: {steps} x the printed ms/step = {printed_s:.3f} s, the program ran {wall_s:.3f} s")


def check_cnn_no_replay(examples, digits):
    # One step per epoch (1437 training images, batch 1024): calls 1-2 eager, call 3 captures.
    rc, out, _ = run(f"{examples}/train_cnn", "--epochs=3", "--batch=1024", "--min_accuracy=0", f"--data={digits}")
    check(rc == 0, f"train_cnn --epochs=3 --batch=1024: exit status {rc}" + (f":\n{out}" if rc != 0 else ""))
    line = next((l for l in out.splitlines() if l.startswith("ms/step")), "")
    check("replay n/a" in line and not re.search(r"[0-9.]+x\)", line),
          f"train_cnn: no replay timed, no ratio printed: {line}")


def main():
    examples = sys.argv[1]
    # Steps 1-2 eager, 3 captures: no plain replay in lockstep with the eager steps.
    check_gpt_json(examples, ["--steps=3", "--eager_steps=3", "--log_every=3"], ["replay_ms_per_step"])
    # No eager reference steps at all.
    check_gpt_json(examples, ["--steps=5", "--eager_steps=0", "--log_every=5"],
                   ["eager_ms_per_step", "bitwise_equal"])
    check_mlp_step_time(examples)
    check_cnn_no_replay(examples, sys.argv[2])
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
