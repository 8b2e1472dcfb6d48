// Errors that kernels find in tensor DATA while no host check runs: in the
// recorded warm-up and in replays of a captured step, where the host cannot
// stop to read indices (NOTE [ Index checks ] in src/backends/cpu/nn.h). A
// kernel that meets a bad index skips it (it never reads or writes out of
// bounds) and reports it here; capture() and Graph::replay() turn a report
// into a Status that names the op, so a bad batch is never a silent answer.
//
//   report_kernel_error(KernelError::kClassIndex);   // inside a kernel, any thread
//   uint32_t seen = take_kernel_errors();            // after the step: bits, then cleared
//
// Process-wide, like the streams' observers; CPU kernels only so far (the
// CUDA kernels skip bad indices but do not report yet).
#pragma once

#include <cstdint>
#include <string>

namespace encore {

enum class KernelError : uint32_t {
  kClassIndex = 1u << 0,       // cross_entropy: a target class outside [0, C) that is not ignore_index
  kEmbeddingIndex = 1u << 1,   // embedding: an index outside [0, num_embeddings)
};

// Thread-safe; cheap (one atomic or).
void report_kernel_error(KernelError e);
// The errors reported since the last call, as a bit set; clears them.
uint32_t take_kernel_errors();
// "cross_entropy: a target class out of range; embedding: ..." for a bit set.
std::string describe_kernel_errors(uint32_t bits);

}  // namespace encore
