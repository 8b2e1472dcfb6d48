// What makes two launches the same kernel with the same host values: the
// recorded warm-up's and the capture run's launch i must agree in every
// non-pointer argument byte (scalars, sizes, dtypes, modes), point into the
// same operands at the same offsets, and read and write the same persistent
// storages (and the same temporaries, by allocation index). Anything else
// would be frozen into the graph at the capture run's value.
//
//   // recorder, for each launch:
//   record_launch_identity(launch, operand_temporaries, rec);   // args, fields, targets, storage ids
//   // capture observer, for launch k of the capture run:
//   std::string why = launch_difference(trace.kernels[k], launch, temporaries_now);
//   if (!why.empty()) refuse(why);
#pragma once

#include <string>
#include <vector>

#include "absl/types/span.h"
#include "capture/trace.h"
#include "src/core/step_observer.h"

namespace encore::capture_internal {

// Fills rec.args, rec.fields, rec.targets and rec.storage_ids from `launch`.
void record_launch_identity(const LaunchRecord& launch, KernelRecord& rec);

// "" when `now` matches `recorded`, else what differs, for a message that
// starts "capture: kernel #k 'op' ...". `temporaries` holds, per operand of
// `now` (reads, then writes), its temporary id in the capture run, or
// kPersistent.
std::string launch_difference(const KernelRecord& recorded, const LaunchRecord& now,
                              absl::Span<const int32_t> temporaries);

// The host values of a recorded launch a user may have meant to change
// (floats and value bits: alpha, eps, a fill value), as "name=value" pairs.
std::vector<std::pair<std::string, std::string>> frozen_values(const KernelRecord& rec);

}  // namespace encore::capture_internal
