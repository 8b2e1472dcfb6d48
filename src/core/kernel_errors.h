// Errors that kernels find in tensor DATA while no host check runs, where
// the host cannot stop to read indices (NOTE [ Index checks ] in
// src/backends/kernel_table.h): CPU kernels in the recorded warm-up and in replays
// of a captured step; CUDA kernels always (eager CUDA ops do not read indices
// on the host: that would wait for the GPU at every call). A kernel that meets
// a bad index skips it (it never reads or writes out of bounds) and reports
// it here, so a bad batch is never a silent answer:
//  - capture() refuses a recorded warm-up with reports, naming the op;
//  - a CPU Graph::replay() returns InvalidArgument naming the op;
//  - on CUDA the report is read at the next synchronization of the device
//    (a host read such as loss.item(), printing, to(kCPU),
//    encore::synchronize()), which throws encore::Error naming the op: CUDA
//    kernels and replays are asynchronous, so the error arrives later than
//    the op, like any CUDA error.
//
//   report_kernel_error(KernelError::kClassIndex);   // inside a CPU kernel, any thread
//   uint32_t seen = take_kernel_errors(kCPU);        // after the step: bits, then cleared
//
// CUDA kernels set the same bits in their device's error word
// (NOTE [ Kernel error words ] in src/backends/cuda/runtime.h).
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

#include "encore/device.h"

namespace encore {

enum class KernelError : uint32_t {
  kClassIndex = 1u << 0,       // cross_entropy: a target class outside [0, C) that is not ignore_index
  kEmbeddingIndex = 1u << 1,   // embedding: an index outside [0, num_embeddings)
  kNllTarget = 1u << 2,        // nll_loss: a target class outside [0, C) that is not ignore_index
  kGatherIndex = 1u << 3,      // gather, index_select: an index outside [0, size)
  kScatterIndex = 1u << 4,     // scatter_add: an index outside [0, size)
  kMultinomialProbs = 1u << 5, // multinomial: a row that is no distribution (negative, infinite, NaN, all 0)
};

// CPU kernels: thread-safe; cheap (one atomic or). The report goes to the
// word of the thread that launched the kernel (NOTE [ One word per
// launching thread ]), also from the threads running its parallel tasks.
void report_kernel_error(KernelError e);
// The errors reported on `device` since the last call, as a bit set; clears
// them. CPU: the calling thread's reports only. CUDA: with `wait`, waits for encore's stream of the device first
// (throws encore::Error if a kernel failed), so the set covers all work
// queued so far; without, it holds what the kernels finished so far reported
// (one read of pinned host memory).
uint32_t take_kernel_errors(Device device, bool wait = true);
// "cross_entropy met a target class ...; embedding met ..." for a bit set.
std::string describe_kernel_errors(uint32_t bits);
// NOTE [ One word per launching thread ]: each thread has its own CPU error
// word, so that two threads replaying CPU graphs at once (or a data loader
// beside a replay) neither take nor clear each other's reports: a shared word
// let one replay's start clear the other's report, which then returned OK
// over bad data. A CPU kernel runs on its launching thread and on the
// threads of its parallel tasks; run_tasks (src/backends/cpu/workers.h)
// points those threads at the launcher's word for the task with this scope.
class KernelErrorWordScope {
 public:
  // The calling thread's current target: its own word, or the one a scope set.
  static std::atomic<uint32_t>* current();
  explicit KernelErrorWordScope(std::atomic<uint32_t>* word);
  ~KernelErrorWordScope();
  KernelErrorWordScope(const KernelErrorWordScope&) = delete;
  KernelErrorWordScope& operator=(const KernelErrorWordScope&) = delete;

 private:
  std::atomic<uint32_t>* saved_;
};

// For a synchronization point: throws encore::Error (kInvalidArgument) naming
// the ops of `bits` and `device` when bits != 0.
void throw_kernel_errors(uint32_t bits, Device device);

}  // namespace encore
