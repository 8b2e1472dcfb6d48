// Progress lines for long runs (the examples, your training loops): step,
// loss, throughput and time left. On a terminal the line is redrawn in
// place (a carriage return, at most every redraw_s) and kept every `every`
// steps; into a pipe or a file it is one plain line every `every` steps and
// at the last, each flushed at once so nothing is held back.
//
//   encore::Progress progress({.total = steps, .every = 100, .unit = "tokens", .label = "train"});
//   for (int64_t s = 1; s <= steps; ++s) {
//     float loss = train({x, y})[0].item<float>();
//     progress.update(s, loss, B * T);                 // units done in this step
//   }
//   // train step  1500/1500  loss 1.1856  39235 tokens/s  ETA 0s
//   // encore-launch step 12/16  3 points/s  ETA 2s      (update(step, units): no loss)
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

namespace encore {

struct ProgressOptions {
  int64_t total = 0;            // steps in the run (> 0 for a percentage-free "s/total" and the ETA)
  int64_t every = 100;          // steps between kept lines (>= 1)
  std::string unit = "steps";   // what update()'s count counts, per second: "tokens", "samples"
  std::string label;            // printed first, e.g. "train"
  std::FILE* out = stdout;      // not owned
  int tty = -1;                 // 1: redraw in place, 0: plain lines, -1: ask isatty(out)
  double redraw_s = 0.1;        // on a terminal, the shortest time between redraws (s)
};

class Progress {
 public:
  explicit Progress(ProgressOptions options);
  // Step `step` (1-based) is done with this loss; `units` (>= 0, else
  // encore::Error) of options.unit were processed in it. Prints as described
  // above. Throughput is the units of this object's updates over the time
  // since construction; the ETA times the steps from the first one update()
  // was given, construction counting as its start, so a run resumed at step
  // 9001 of 10000 estimates from its own steps, not from 9000 it never ran.
  void update(int64_t step, double loss, int64_t units);
  // The same line without a loss (tools: measurement points, plans).
  void update(int64_t step, int64_t units);
  // The text of the line update() last built, without line ending (tests).
  const std::string& last_line() const { return line_; }

  // "1h02m", "3m05s", "42s": a duration in whole seconds, rounded; negative
  // ones are "0s", those of 100000 hours or more (infinity included: no
  // progress) ">99999h", and NaN (no estimate) "?".
  static std::string duration(double seconds);

 private:
  ProgressOptions options_;
  bool tty_ = false;
  double start_s_ = 0, last_draw_s_ = -1;
  double units_ = 0;         // of every update(), summed
  int64_t first_step_ = 0;   // the step of the first update(), once seen_step_
  bool seen_step_ = false;
  std::string line_;

  void draw(int64_t step, const double* loss, int64_t units);   // loss: null for none
};

}  // namespace encore
