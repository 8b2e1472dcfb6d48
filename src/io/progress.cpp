#include "encore/progress.h"

#include <unistd.h>

#include <chrono>
#include <cmath>

#include "absl/strings/str_format.h"
#include "encore/error.h"

namespace encore {

namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

Progress::Progress(ProgressOptions options) : options_(std::move(options)) {
  ENCORE_CHECK(options_.every >= 1 && options_.total >= 0 && options_.out != nullptr,
               "Progress: every (%d) must be >= 1, total (%d) >= 0, and out a stream", options_.every,
               options_.total);
  tty_ = options_.tty >= 0 ? options_.tty == 1 : isatty(fileno(options_.out)) == 1;
  start_s_ = now_s();
}

std::string Progress::duration(double seconds) {
  if (std::isnan(seconds)) return "?";
  constexpr double kMaxHours = 99999;   // past it (inf included), only that it is longer
  if (seconds >= (kMaxHours + 1) * 3600) return absl::StrFormat(">%.0fh", kMaxHours);
  const int64_t s = seconds > 0 ? static_cast<int64_t>(std::llround(seconds)) : 0;
  if (s >= 3600) return absl::StrFormat("%dh%02dm", s / 3600, s / 60 % 60);
  if (s >= 60) return absl::StrFormat("%dm%02ds", s / 60, s % 60);
  return absl::StrFormat("%ds", s);
}

void Progress::update(int64_t step, double loss, int64_t units) { draw(step, &loss, units); }

void Progress::update(int64_t step, int64_t units) { draw(step, nullptr, units); }

void Progress::draw(int64_t step, const double* loss, int64_t units) {
  ENCORE_CHECK(units >= 0, "Progress: units done in a step must be >= 0, got %d (step %d)", units, step);
  if (!seen_step_) first_step_ = step, seen_step_ = true;
  units_ += static_cast<double>(units);   // a double: no sum of int64 counts overflows it
  const double t = now_s(), elapsed = t - start_s_;
  const bool keep = step % options_.every == 0 || step == options_.total;
  if (!keep && (!tty_ || (last_draw_s_ >= 0 && t - last_draw_s_ < options_.redraw_s))) return;
  line_.clear();
  if (!options_.label.empty()) line_ = options_.label + " ";
  line_ += options_.total > 0 ? absl::StrFormat("step %*d/%d", static_cast<int>(std::to_string(options_.total).size()), step,
                                                options_.total)
                              : absl::StrFormat("step %d", step);
  if (loss != nullptr) absl::StrAppendFormat(&line_, "  loss %.4f", *loss);
  absl::StrAppendFormat(&line_, "  %.0f %s/s", elapsed > 0 ? units_ / elapsed : 0.0, options_.unit);
  // NOTE [ Rates from the first step seen ]: a run resumed at step 9001
  // timed its steps from 9001 on, not from 1: construction counts as the
  // start of the first step update() was given. In doubles: no step
  // overflows the differences.
  const double done = static_cast<double>(step) - static_cast<double>(first_step_) + 1;
  if (options_.total > 0 && done > 0) {
    const double left = static_cast<double>(options_.total) - static_cast<double>(step);
    absl::StrAppend(&line_, "  ETA ", duration(elapsed / done * left));
  }
  if (tty_) {
    std::fprintf(options_.out, "\r%s\033[K%s", line_.c_str(), keep ? "\n" : "");   // \033[K: clear to the end
  } else {
    std::fprintf(options_.out, "%s\n", line_.c_str());
  }
  std::fflush(options_.out);
  last_draw_s_ = t;
}

}  // namespace encore
