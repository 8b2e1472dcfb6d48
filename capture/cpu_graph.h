// The CPU graph: a flat array of kernels with their argument bytes. replay()
// is one loop of indirect calls: no allocation, no checks, no dispatch. The
// CPU's Capturer and Executable (capture/executable.h) are built on it:
// during the capture run every launch is appended instead of run.
//
//   CpuGraph g;
//   g.append(launch);   // per launch of the capture run (copies its argument bytes)
//   g.freeze();         // once, after the last
//   g.replay();         // every step after
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

#include "src/core/step_observer.h"

namespace encore::capture_internal {

class CpuGraph {
 public:
  // Copies the launch's argument bytes (aligned to 16) and appends a node.
  void append(const LaunchRecord& launch);
  void freeze();   // resolves argument offsets to pointers
  void replay() const {
    for (const Node& n : nodes_) n.thunk(n.args);
  }
  // replay() with a timestamp before the first node and after each one:
  // stamps[i + 1] - stamps[i] is node i's wall time (ns of steady_clock,
  // including one clock read). `stamps` holds size() + 1 values.
  void replay_timed(int64_t* stamps) const;
  size_t size() const { return nodes_.size(); }

 private:
  struct Node {
    KernelThunk thunk;
    const void* args;   // into args_ after freeze()
    size_t offset;      // into args_
  };
  std::vector<Node> nodes_;
  std::vector<std::max_align_t> args_;   // max-aligned storage for every node's arguments
  size_t used_ = 0;                      // bytes of args_ in use
};

}  // namespace encore::capture_internal
