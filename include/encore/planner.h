// encore/planner.h — turn buffers with lifetimes into offsets in one arena.
//
// A captured training step allocates many temporaries. The planner decides
// where each one lives inside a single arena so that two buffers alive at the
// same time never share a byte, and reports how large the arena must be (the
// peak). It knows nothing about tensors or devices and depends on Abseil only.
//
// Units: sizes, offsets, alignments and peaks are in bytes; lifetimes are in
// abstract time steps (for a captured step: kernel indices). A buffer is live
// over the half-open interval [lower, upper), so a buffer whose upper is t and
// one whose lower is t may share memory.
//
// Example usage:
//
//   using namespace encore::planner;
//   std::vector<Buffer> buffers = {
//       {.id = "act", .size = 4096, .lower = 0, .upper = 4},
//       {.id = "tmp", .size = 1024, .lower = 1, .upper = 2},
//       {.id = "grad", .size = 4096, .lower = 4, .upper = 6},  // reuses "act"
//   };
//   absl::StatusOr<Plan> plan = plan_buffers(buffers, {.time_limit_s = 0.5});
//   if (!plan.ok()) return plan.status();
//   // plan->offsets[i] is where buffers[i] starts; plan->peak == 5120 ==
//   // lower_bound(buffers), so this plan is optimal.
//
// Problems are exchanged as CSV in MiniMalloc's format (see parse_csv), so the
// published MiniMalloc benchmarks and encore's captured steps are measured the
// same way: quality is peak / lower_bound, reported with planning time.
#ifndef ENCORE_PLANNER_H_
#define ENCORE_PLANNER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace encore::planner {

// One buffer to place. Invariants (checked by check_buffers): size >= 0,
// lower < upper, alignment a power of two, ids unique within a problem.
struct Buffer {
  std::string id;         // a name for messages and CSV files ("b1", "42")
  int64_t size = 0;       // bytes
  int64_t lower = 0;      // first time step the buffer is live
  int64_t upper = 0;      // first time step it is no longer live
  int64_t alignment = 1;  // bytes; the offset must be a multiple of it
};

// Where each buffer goes. offsets[i] belongs to the i-th input buffer.
struct Plan {
  std::vector<int64_t> offsets;  // bytes from the arena start
  int64_t peak = 0;              // arena bytes: max(offset + size), or more
                                 // for `caching` (its reserved segment bytes)
  int64_t peak_floor = 0;        // bytes no plan can beat: lower_bound(), or
                                 // more where `exact` proved the capacities
                                 // below it infeasible. peak == peak_floor:
                                 // the plan is proven optimal
  int64_t stacked_by_limit = 0;  // `exact` and `best`: buffers the time
                                 // limit left out of the first plan (see
                                 // PlanOptions::time_limit_s), stacked above
                                 // all the others and reusing bytes only
                                 // last in, first out: valid, but the peak
                                 // may be up to the naive plan's. 0: the
                                 // first plan was made whole (always so for
                                 // the other algorithms)
};

// The planning algorithms, cheapest first. Each is selectable by name; n is
// the number of buffers.
enum class Algorithm {
  kNaive,       // "naive": every buffer its own slot; peak = sum of sizes. O(n)
  kCaching,     // "caching": PyTorch's CUDA caching allocator replaying the
                //   lifetimes in time order (see planner/caching.cpp). O(n log n)
  kOnline,      // "online": best fit over a coalescing free list, in time
                //   order: what a runtime allocator can do. O(n log n)
  kGreedy,      // "greedy": offline, by decreasing size, each buffer in the
                //   smallest gap free for its whole lifetime. O(n log n)
  kBestGreedy,  // "best_greedy": the best greedy plan over four orderings:
                //   size, lifetime length, area, start
  kExact,       // "exact": search over canonical placements (MiniMalloc-style)
                //   from the best greedy plan made in time (the online plan if
                //   none was), until proven optimal or out of time
  kBest,        // "best": online and greedy, then exact (up to 8000 buffers)
                //   or repacking of the peak region (above), within the time
                //   limit; what encore's capture uses
};

// All algorithms in the order above.
[[nodiscard]] absl::Span<const Algorithm> all_algorithms();
[[nodiscard]] absl::string_view algorithm_name(Algorithm algorithm);
// Accepts the names above; InvalidArgument listing the known names otherwise.
[[nodiscard]] absl::StatusOr<Algorithm> parse_algorithm(absl::string_view name);

struct PlanOptions {
  Algorithm algorithm = Algorithm::kBest;
  // Wall-clock budget for the searching algorithms (exact, best), in seconds,
  // for the whole call: checking the input, the lower bound and validating
  // the plan count against it. They return the best plan found when it runs
  // out. Both make the online plan first (about 0.4 s for 10^6 buffers on
  // this project's 2-core build machine), then greedy plans where they can
  // finish in time, then search. If the limit runs out during the online
  // plan, the buffers it has not reached are stacked above the rest
  // (Plan::stacked_by_limit says how many), so the call returns a valid,
  // validated plan in time: within the limit plus a few ms (one step of a
  // phase), except for what cannot be cut: checking the input, the lower
  // bound and validation, together about 0.28 s for 10^6 buffers
  // (bench/RESULTS.md "Issue 17: the limit at 10^6 buffers"), which a
  // shorter limit takes. The fast algorithms ignore the limit. The exact
  // search is skipped for problems of more than 8000 buffers or 4 million
  // pairs of buffers overlapping in time (it needs memory per pair and
  // recurses once per buffer, up to 2 MiB of stack); `best` repacks the peak
  // region there.
  double time_limit_s = 0.5;
  // For `exact` and `best`: 0 minimises the peak. A positive capacity (bytes)
  // asks MiniMalloc's decision question instead: they stop at the first plan
  // whose peak is within it, or at a proof that none exists (then
  // peak_floor > capacity and the plan returned is the best one found).
  int64_t capacity = 0;
};

// Plans `buffers` with options.algorithm. The plan is validated before it is
// returned. InvalidArgument if the buffers break an invariant of Buffer;
// ResourceExhausted (naming a buffer) if their sizes, alignment slack
// included, add up past 2^62 bytes, so that no offset or peak can overflow.
[[nodiscard]] absl::StatusOr<Plan> plan_buffers(absl::Span<const Buffer> buffers,
                                                const PlanOptions& options = {});

// A peak no plan can beat: the largest number of bytes live at one time step.
// With alignments, every live size is first rounded up to the smallest
// alignment in the problem (offsets are all multiples of it), except for the
// slack of the one buffer that may sit on top; with alignment 1 everywhere it
// is exactly the max over time of the live bytes. O(n log n).
[[nodiscard]] int64_t lower_bound(absl::Span<const Buffer> buffers);

// OK if `plan` is usable for `buffers`: one offset per buffer, offsets >= 0
// and aligned, peak >= every offset + size, and no two buffers whose lifetimes
// intersect overlap in memory. The message names the offending buffer ids.
// O(n log n).
[[nodiscard]] absl::Status validate(absl::Span<const Buffer> buffers, const Plan& plan);

// OK if every buffer satisfies the invariants listed at Buffer.
[[nodiscard]] absl::Status check_buffers(absl::Span<const Buffer> buffers);

// ---- CSV in MiniMalloc's format --------------------------------------------
//
// A header row naming the columns, then one buffer a row:
//   id,lower,upper,size[,alignment][,offset]     (columns in any order)
// `id` is any string without commas or control bytes; the rest are integers.
// MiniMalloc's older names are read too: buffer or buffer_id for id, start or
// begin for lower, and end (inclusive: upper = end + 1) for upper.
// Blank lines and a UTF-8 byte order mark at the start are ignored. Errors
// are InvalidArgument and name the line: "line 7: ...".

struct CsvProblem {
  std::vector<Buffer> buffers;
  std::vector<int64_t> offsets;  // one per buffer if the file had `offset`
  bool has_alignment = false;    // the file had an `alignment` column
};

[[nodiscard]] absl::StatusOr<CsvProblem> parse_csv(absl::string_view text);
// Reads and parses a file; NotFound if it cannot be opened (with the cause),
// InvalidArgument for a directory, ResourceExhausted past 1 GiB.
[[nodiscard]] absl::StatusOr<CsvProblem> read_csv(const std::string& path);

// Writes id,lower,upper,size[,alignment] and, when `plan` is not null, offset.
[[nodiscard]] std::string format_csv(absl::Span<const Buffer> buffers, const Plan* plan,
                                     bool with_alignment);
// Writes `contents` to `path` (replacing it) in place: a write that fails
// part way leaves part of a file (encore-plan's --out and --svg are written
// whole or not at all instead, by src/core/atomic_file.h, which the planner
// cannot include); errors name the path and the cause.
[[nodiscard]] absl::Status write_file(const std::string& path, absl::string_view contents);

// An SVG picture of a plan: time across, address up, one rectangle per buffer,
// the lower bound as a dashed horizontal line, labelled axes.
[[nodiscard]] std::string render_svg(absl::Span<const Buffer> buffers, const Plan& plan);

}  // namespace encore::planner

#endif  // ENCORE_PLANNER_H_
