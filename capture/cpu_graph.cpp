#include "capture/cpu_graph.h"

namespace encore::capture_internal {

void CpuGraph::append(const LaunchRecord& launch) {
  constexpr size_t kAlign = alignof(std::max_align_t);
  const size_t offset = used_;
  used_ += (launch.args_size + kAlign - 1) / kAlign * kAlign;
  if (used_ > args_.size() * sizeof(std::max_align_t)) args_.resize(2 * used_ / sizeof(std::max_align_t) + 1);
  std::memcpy(reinterpret_cast<char*>(args_.data()) + offset, launch.args, launch.args_size);
  nodes_.push_back({launch.thunk, nullptr, offset});
}

void CpuGraph::freeze() {
  for (Node& n : nodes_) n.args = reinterpret_cast<const char*>(args_.data()) + n.offset;
}

}  // namespace encore::capture_internal
