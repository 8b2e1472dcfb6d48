// Graph: replay and the read-only view of what capture() recorded
// (include/encore/capture.h, capture/graph_impl.h).
#include <algorithm>

#include "capture/graph_impl.h"
#include "encore/error.h"
#include "src/core/phase.h"

namespace encore {

Graph::Graph(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Graph::Graph(Graph&&) noexcept = default;
Graph& Graph::operator=(Graph&&) noexcept = default;
Graph::~Graph() = default;

absl::Status Graph::replay() {
  if (absl::Status s = impl_->check_guards(); !s.ok()) return s;
  absl::Status s = impl_->executable->replay();
  if (s.ok()) impl_->replayed = true;
  return s;
}

const Tensor& Graph::output(size_t i) const {
  ENCORE_CHECK(i < impl_->outputs.size(), "Graph::output: index %d out of range (%d outputs)", i,
               impl_->outputs.size());
  ENCORE_CHECK_CODE(impl_->replayed, kFailedPrecondition,
                    "Graph::output: no replay has run yet, so output %d holds nothing (capture() records the "
                    "step; its capture run computes nothing): call replay() first",
                    i);
  return impl_->outputs[i];
}
size_t Graph::num_outputs() const { return impl_->outputs.size(); }
const CaptureStats& Graph::stats() const { return impl_->stats; }
const std::vector<planner::Buffer>& Graph::buffers() const { return impl_->buffers; }
absl::Status Graph::dump_dot(const std::string& path) const { return impl_->executable->dump_dot(path, impl_->trace); }
Graph::Impl& Graph::internals() const { return *impl_; }

// ---- Graph::Impl ----

absl::Status Graph::Impl::check_guards() const {
  for (const capture_internal::Guard& g : guards) {
    // The graph holds one reference; nobody else holding one means the tensor
    // was freed or its handle now points at other storage.
    if (g.storage->use_count() < 2) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "replay: a %d-byte tensor that the captured step uses (first by '%s') was freed or replaced since "
          "capture (a parameter or static input reassigned, moved or dropped?); keep it alive, refill it "
          "in place with copy_(), and capture again after changing it",
          g.storage->nbytes(), g.first_op));
    }
  }
  return absl::OkStatus();
}

absl::Status Graph::Impl::replay_timed(std::vector<int64_t>& stamps) {
  if (absl::Status s = check_guards(); !s.ok()) return s;
  absl::Status s = executable->replay_timed(stamps);
  if (s.ok()) replayed = true;
  return s;
}

const char* Graph::Impl::node_op(size_t i) const { return trace.kernels.at(i).op; }
const char* Graph::Impl::node_phase(size_t i) const { return phase_name(trace.kernels.at(i).phase); }
const std::vector<int64_t>& Graph::Impl::node_read_bytes(size_t i) const { return trace.kernels.at(i).read_bytes; }
const std::vector<int64_t>& Graph::Impl::node_write_bytes(size_t i) const { return trace.kernels.at(i).write_bytes; }

std::vector<int32_t> Graph::Impl::node_temporaries(size_t i) const {
  const capture_internal::KernelRecord& k = trace.kernels.at(i);
  std::vector<int32_t> out;
  for (const auto* ids : {&k.reads, &k.writes}) {
    for (int32_t id : *ids) {
      if (id != capture_internal::kPersistent) out.push_back(id);
    }
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

}  // namespace encore
