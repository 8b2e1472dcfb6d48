#include "src/core/kernel_errors.h"

#include <atomic>

namespace encore {
namespace {
std::atomic<uint32_t> reported{0};
}  // namespace

void report_kernel_error(KernelError e) { reported.fetch_or(static_cast<uint32_t>(e), std::memory_order_relaxed); }

uint32_t take_kernel_errors() { return reported.exchange(0, std::memory_order_relaxed); }

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
  return out;
}

}  // namespace encore
