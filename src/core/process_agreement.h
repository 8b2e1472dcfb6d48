// The check that every process of a data-parallel job captured the same step.
//
// Collectives in a captured step only work when every rank replays the same
// kernels in the same order. capture/ records a step and knows its kernels
// but not the processes; src/dist/ knows the processes. So core holds one
// hook: src/dist/ installs it when it makes a group of more than one
// process, and capture() calls it after each recorded run with a fingerprint
// of the recorded kernels (agree_on_step). The hook gathers every rank's
// fingerprint and returns an error (kFailedPrecondition) naming the ranks
// that differ, or kDeadlineExceeded when a rank never arrives.
//
//   set_step_agreement(&my_agreement);                       // src/dist/
//   ENCORE_RETURN_IF_ERROR(agree_on_step(fingerprint, n));   // capture/: OK without a hook
#pragma once

#include <cstdint>

#include "absl/status/status.h"

namespace encore {

// fingerprint: a hash of the recorded kernels (stable across processes), or
// 0 when this rank's recorded run was refused (every rank still calls the
// hook, so that none waits for it); kernels: how many there were (for the
// message).
using StepAgreement = absl::Status (*)(uint64_t fingerprint, int64_t kernels);

// Installs the hook (nullptr removes it); process-wide.
void set_step_agreement(StepAgreement hook);
// Runs the installed hook; OK when there is none (one process).
absl::Status agree_on_step(uint64_t fingerprint, int64_t kernels);

}  // namespace encore
