// libFuzzer target: the planner's CSV reader (parse_csv) on arbitrary text,
// then, for every problem it accepts, the fast planning algorithms, the
// validator, the CSV writer and the SVG picture. Each must return a value
// or a Status; every plan returned must validate (a plan that does not is a
// finding). Seeds: fuzz/make_corpus.cpp.
//
//   ./run fuzz planner_csv_fuzz
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "encore/planner.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace planner = encore::planner;
  const std::string text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<planner::CsvProblem> problem = planner::parse_csv(text);
  if (!problem.ok() || !planner::check_buffers(problem->buffers).ok()) return 0;
  (void)planner::lower_bound(problem->buffers);
  for (planner::Algorithm a : {planner::Algorithm::kNaive, planner::Algorithm::kCaching, planner::Algorithm::kOnline,
                               planner::Algorithm::kGreedy, planner::Algorithm::kBestGreedy}) {
    absl::StatusOr<planner::Plan> plan = planner::plan_buffers(problem->buffers, {.algorithm = a});
    if (!plan.ok()) continue;   // e.g. sizes past 2^62: refused, fine
    if (!planner::validate(problem->buffers, *plan).ok()) std::abort();
    (void)planner::format_csv(problem->buffers, &*plan, problem->has_alignment);
    (void)planner::render_svg(problem->buffers, *plan);
  }
  if (problem->offsets.size() == problem->buffers.size()) {   // the file's own plan, if it had one
    planner::Plan given{.offsets = problem->offsets};
    for (size_t i = 0; i < given.offsets.size(); ++i) {
      int64_t end = 0;
      if (__builtin_add_overflow(given.offsets[i], problem->buffers[i].size, &end)) return 0;
      given.peak = std::max(given.peak, end);
    }
    (void)planner::validate(problem->buffers, given);
  }
  return 0;
}
