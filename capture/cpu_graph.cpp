#include "capture/cpu_graph.h"

#include <chrono>

#include "absl/strings/str_cat.h"
#include "capture/executable.h"
#include "capture/recorder.h"
#include "encore/error.h"
#include "encore/tensor.h"
#include "src/core/kernel_errors.h"

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

namespace {

// InvalidArgument naming the ops whose kernels reported bad data during the
// replay that just ran on this thread, or OK.
absl::Status kernel_errors_status() {
  const uint32_t errors = take_kernel_errors(kCPU);
  if (errors == 0) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "replay: ", describe_kernel_errors(errors),
      "; the step ran with those rows skipped, so this replay's outputs, gradients and parameter updates left "
      "them out: check the batch copied into the static inputs"));
}

class CpuExecutable final : public Executable {
 public:
  explicit CpuExecutable(CpuGraph graph) : graph_(std::move(graph)) {}

  // Bad data met by a kernel is reported after the whole list ran (the
  // kernels skip the bad rows): ran, with an error (NOTE [ A replay that ran ]).
  ReplayResult replay() override {
    (void)take_kernel_errors(kCPU);   // reports from before this replay are not its own
    graph_.replay();
    return {kernel_errors_status(), /*ran=*/true};
  }
  ReplayResult replay_timed(std::vector<int64_t>& stamps) override {
    stamps.resize(graph_.size() + 1);
    (void)take_kernel_errors(kCPU);
    graph_.replay_timed(stamps.data());
    return {kernel_errors_status(), /*ran=*/true};
  }
  absl::Status dump_dot(const std::string& path, const Trace& trace) const override {
    return write_trace_dot(trace, path);
  }

 private:
  CpuGraph graph_;
};

// Takes every launch of the capture run into a CpuGraph instead of running
// it, exactly as CUDA stream capture behaves: the capture run computes nothing.
class CpuCapturer final : public Capturer {
 public:
  void prepare_arena(Storage& arena) override {
    std::memset(arena.data(), 0, static_cast<size_t>(arena.nbytes()));   // touch every page once, now
  }
  bool take(const LaunchRecord& launch) override {
    graph_.append(launch);
    return false;
  }
  // reuse(): ignored. Instantiating a kernel list is resolving its argument
  // pointers (about 1 ns a node); rewriting an old list's argument bytes in
  // place measured 25x slower at 10^4 nodes (bench/RESULTS.md).
  absl::StatusOr<std::unique_ptr<Executable>> capture(const std::function<void()>& run) override {
    if (absl::Status s = status_of(run); !s.ok()) return s;
    const auto t0 = std::chrono::steady_clock::now();
    graph_.freeze();
    std::unique_ptr<Executable> exe = std::make_unique<CpuExecutable>(std::move(graph_));
    instantiate_ns_ = (std::chrono::steady_clock::now() - t0).count();
    return exe;
  }
  bool updated() const override { return false; }
  int64_t instantiate_ns() const override { return instantiate_ns_; }

 private:
  CpuGraph graph_;
  int64_t instantiate_ns_ = 0;
};

}  // namespace

std::unique_ptr<Capturer> make_cpu_capturer() { return std::make_unique<CpuCapturer>(); }

}  // namespace encore::capture_internal
