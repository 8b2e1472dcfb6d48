#include "capture/cpu_graph.h"

#include <chrono>

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

void CpuGraph::replay_timed(int64_t* stamps) const {
  using Clock = std::chrono::steady_clock;
  static_assert(std::is_same_v<Clock::period, std::nano>, "stamps are nanoseconds");
  stamps[0] = Clock::now().time_since_epoch().count();
  for (size_t i = 0; i < nodes_.size(); ++i) {
    nodes_[i].thunk(nodes_[i].args);
    stamps[i + 1] = Clock::now().time_since_epoch().count();
  }
}

}  // namespace encore::capture_internal
