#include "src/core/kernel_errors.h"

#include <atomic>

#include "absl/strings/str_cat.h"
#include "encore/error.h"
#include "src/core/device_runtime.h"

namespace encore {
namespace {
// NOTE [ One word per launching thread ] in kernel_errors.h.
thread_local std::atomic<uint32_t> own_word{0};
thread_local std::atomic<uint32_t>* target_word = nullptr;   // null: own_word
}  // namespace

std::atomic<uint32_t>* KernelErrorWordScope::current() {
  return target_word != nullptr ? target_word : &own_word;
}

KernelErrorWordScope::KernelErrorWordScope(std::atomic<uint32_t>* word) : saved_(target_word) { target_word = word; }

KernelErrorWordScope::~KernelErrorWordScope() { target_word = saved_; }

void report_kernel_error(KernelError e) {
  KernelErrorWordScope::current()->fetch_or(static_cast<uint32_t>(e), std::memory_order_relaxed);
}

uint32_t take_kernel_errors(Device device, bool wait) {
  if (device.is_cuda()) {
    const DeviceRuntime& rt = cuda_runtime();
    if (wait) rt.synchronize(device.index);
    return rt.take_error_word(device.index);
  }
  return own_word.exchange(0, std::memory_order_relaxed);
}

std::string describe_kernel_errors(uint32_t bits) {
  std::string out;
  auto add = [&](const char* text) {
    if (!out.empty()) out += "; ";
    out += text;
  };
  if (bits & static_cast<uint32_t>(KernelError::kClassIndex)) {
    add("cross_entropy met a target class outside [0, C) that is not ignore_index (those rows were left out)");
  }
  if (bits & static_cast<uint32_t>(KernelError::kEmbeddingIndex)) {
    add("embedding met an index outside [0, num_embeddings) (those rows read as zeros)");
  }
  if (bits & static_cast<uint32_t>(KernelError::kNllTarget)) {
    add("nll_loss met a target class outside [0, C) that is not ignore_index (those targets counted as ignored)");
  }
  if (bits & static_cast<uint32_t>(KernelError::kGatherIndex)) {
    add("gather met an index outside [0, size) (those elements read as zeros)");
  }
  if (bits & static_cast<uint32_t>(KernelError::kScatterIndex)) {
    add("scatter_add met an index outside [0, size) (those elements were not added)");
  }
  if (bits & static_cast<uint32_t>(KernelError::kMultinomialProbs)) {
    add("multinomial met a row of probs that is no distribution (negative, infinite or NaN weights, all zero, or "
        "too few non-zero categories without replacement)");
  }
  return out;
}

void throw_kernel_errors(uint32_t bits, Device device) {
  if (bits == 0) return;
  throw_error(absl::StatusCode::kInvalidArgument,
              absl::StrCat(device.str(), ": a kernel queued since the last synchronization met bad data: ",
                           describe_kernel_errors(bits),
                           "; the losses, gradients and parameter updates computed from it are wrong: check the "
                           "batch (class ids, token ids) and run the step again"));
}

}  // namespace encore
