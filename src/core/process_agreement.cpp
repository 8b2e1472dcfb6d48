#include "src/core/process_agreement.h"

#include <atomic>

namespace encore {
namespace {
std::atomic<StepAgreement> hook{nullptr};
}  // namespace

void set_step_agreement(StepAgreement h) { hook.store(h, std::memory_order_release); }

absl::Status agree_on_step(uint64_t fingerprint, int64_t kernels) {
  StepAgreement h = hook.load(std::memory_order_acquire);
  return h == nullptr ? absl::OkStatus() : h(fingerprint, kernels);
}

}  // namespace encore
