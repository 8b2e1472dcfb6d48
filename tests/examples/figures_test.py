#!/usr/bin/env python3
"""The examples' printed figures are what they measure.

  tests/examples/figures_test.py BUILD/examples

- train_gpt --json ends with one line of strict JSON, also when a figure was
  not measured (no replay in lockstep with the eager steps, or no eager
  steps): that figure is null, and the text says so instead of printing
  "inf" or "nan" (review finding, 2026-12-07: --steps=3 printed
  "speedup infx" and a JSON line with inf, which no JSON parser reads).
"""
import json
import re
import subprocess
import sys

failures = []


def check(ok, what):
    print(("ok: " if ok else "FAIL: ") + what)
    if not ok:
        failures.append(what)


def run(program, *args):
    p = subprocess.run([program, *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=300)
    return p.returncode, p.stdout


def strict_json(line):
    def refuse(name):
        raise ValueError("not JSON: " + name)
    return json.loads(line, parse_constant=refuse)


def check_gpt_json(examples, args, unmeasured):
    rc, out = run(f"{examples}/train_gpt", "--sample_chars=0", "--json", *args)
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
    check(re.search(r"\b(-?nan|inf)\b", text) is None, f"{what}: no inf or nan in the text:\n{text}")


def main():
    examples = sys.argv[1]
    # Steps 1-2 eager, 3 captures: no plain replay in lockstep with the eager steps.
    check_gpt_json(examples, ["--steps=3", "--eager_steps=3", "--log_every=3"], ["replay_ms_per_step"])
    # No eager reference steps at all.
    check_gpt_json(examples, ["--steps=5", "--eager_steps=0", "--log_every=5"],
                   ["eager_ms_per_step", "bitwise_equal"])
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
