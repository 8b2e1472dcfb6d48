// The recorder: watches one eager step (kernels, host reads, allocations and
// frees) and turns it into a Trace; and the Trace as Graphviz DOT.
//
//   Recorder rec;
//   {
//     StepObserverScope observe(&rec);   // exactly one run of the step
//     outs = step();
//     for (const Tensor& t : outs) rec.mark_output(t.storage());
//   }
//   Trace trace = std::move(rec.trace());
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "capture/trace.h"
#include "src/core/step_observer.h"

namespace encore::capture_internal {

// The part of a recording or capturing observer that refuses the step for a
// reason found outside its launches (a Graph replayed inside it): the first
// reason is kept, and capture() returns it once the step is done.
class Refusals {
 public:
  void refuse(std::string why) {
    if (refusal_.empty()) refusal_ = std::move(why);
  }
  const std::string& refusal() const { return refusal_; }

 private:
  std::string refusal_;
};

class Recorder final : public StepObserver, public Refusals {
 public:
  bool on_launch(const LaunchRecord& launch) override;
  // Warm-up steps are real, so a host read runs; the first one is remembered
  // for capture() to refuse the step before it plans anything.
  void on_host_access(const char* op) override;
  void on_allocate(const Storage& storage) override;
  void on_free(const Storage& storage) override;

  // Marks the temporary behind `storage` (if any) as a step output.
  void mark_output(const Storage* storage);
  // The temporaries still alive that are not outputs (they escaped the step).
  std::vector<int32_t> escaped() const;
  Trace& trace() { return trace_; }
  // The first host read of the step (nullptr if none), and how many kernels
  // ran before it.
  const char* first_host_access() const { return first_host_access_; }
  int64_t kernels_before_host_access() const { return kernels_before_host_access_; }
  // The phase the first host read happened in (forward when there was none).
  Phase host_access_phase() const { return host_access_phase_; }

 private:
  int32_t id_of(const Storage* s) const;
  void touch(int32_t id, int64_t kernel);

  Trace trace_;
  const char* first_host_access_ = nullptr;
  int64_t kernels_before_host_access_ = 0;
  Phase host_access_phase_ = Phase::kForward;
  absl::flat_hash_map<uint64_t, int32_t> live_;   // Storage::id() -> temporary id
};

// For each kernel of `trace` and each storage it reads (KernelRecord::reads
// order), the earlier kernel that last wrote that storage, or -1 when none
// did in the step. Temporaries and persistent storages (parameters,
// gradients, optimizer state) alike: storages are told apart by
// KernelRecord::storage_ids (NOTE [ DOT dependencies ] in recorder.cpp).
std::vector<std::vector<int64_t>> read_producers(const Trace& trace);

// Writes `trace` in Graphviz DOT: one node per kernel, named by op and
// filled with its phase's colour (a legend cluster names them), and one
// edge per ordered pair of kernels (a, b) where b reads a storage a was the
// last to write, labelled with those storages (tN: temporary N, p: persistent).
// Whole or not at all, as write_chrome_trace (WriteMode::kAtomicWherePossible,
// src/core/atomic_file.h).
[[nodiscard]] absl::Status write_trace_dot(const Trace& trace, const std::string& path);

}  // namespace encore::capture_internal
