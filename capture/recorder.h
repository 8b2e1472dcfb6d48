// The recorder: watches one eager step (kernels and allocations) and turns
// it into a Trace. Install it on the streams the step may use and as the
// thread's allocation listener for exactly one run of the step.
#pragma once

#include "absl/container/flat_hash_map.h"
#include "capture/allocators.h"
#include "capture/trace.h"
#include "src/core/stream.h"

namespace encore::capture_internal {

class Recorder final : public LaunchObserver, public AllocationListener {
 public:
  bool on_launch(const LaunchRecord& launch) override;
  void on_host_access(const char* op) override {}   // warm-up steps are real: host reads are fine
  void on_allocate(void* p, int64_t nbytes, Device device) override;
  void on_free(void* p) override;

  // Marks the temporary behind `storage` (if any) as a step output.
  void mark_output(const Storage* storage);
  // The temporaries still alive that are not outputs (they escaped the step).
  std::vector<int32_t> escaped() const;
  Trace& trace() { return trace_; }

 private:
  int32_t id_of(const Storage* s) const;
  void touch(int32_t id, int64_t kernel);

  Trace trace_;
  absl::flat_hash_map<const void*, int32_t> live_;   // data pointer -> temporary id
};

}  // namespace encore::capture_internal
