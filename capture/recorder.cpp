#include "capture/recorder.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "capture/launch_match.h"
#include "encore/error.h"
#include "encore/tensor.h"
#include "src/core/atomic_file.h"

namespace encore::capture_internal {

int32_t Recorder::id_of(const Storage* s) const {
  auto it = live_.find(s->id());
  return it == live_.end() ? kPersistent : it->second;
}

void Recorder::touch(int32_t id, int64_t kernel) {
  if (id == kPersistent) return;
  AllocRecord& a = trace_.allocs[id];
  if (a.first_use < 0) a.first_use = kernel;
  a.last_use = kernel;
}

bool Recorder::on_launch(const LaunchRecord& launch) {
  const int64_t k = static_cast<int64_t>(trace_.kernels.size());
  KernelRecord rec{launch.op, launch.thunk, launch.device, {}, {}, current_phase(), {}, {}};
  for (Storage* s : launch.reads) {
    rec.reads.push_back(id_of(s));
    rec.read_bytes.push_back(s->nbytes());
  }
  for (Storage* s : launch.writes) {
    rec.writes.push_back(id_of(s));
    rec.write_bytes.push_back(s->nbytes());
  }
  record_launch_identity(launch, rec);
  for (int32_t id : rec.reads) touch(id, k);
  for (int32_t id : rec.writes) touch(id, k);
  trace_.kernels.push_back(std::move(rec));
  return true;   // warm-up steps really run
}

void Recorder::on_host_access(const char* op) {
  if (first_host_access_ != nullptr) return;
  first_host_access_ = op;
  kernels_before_host_access_ = static_cast<int64_t>(trace_.kernels.size());
  host_access_phase_ = current_phase();
}

void Recorder::on_allocate(const Storage& storage) {
  live_[storage.id()] = static_cast<int32_t>(trace_.allocs.size());
  AllocRecord a;
  a.nbytes = storage.nbytes();
  a.device = storage.device();
  a.allocated_at = static_cast<int64_t>(trace_.kernels.size());
  a.phase = current_phase();
  trace_.allocs.push_back(a);
}

void Recorder::on_free(const Storage& storage) {
  auto it = live_.find(storage.id());
  if (it == live_.end()) return;   // allocated before the recorded step
  trace_.allocs[it->second].freed = true;
  live_.erase(it);
}

void Recorder::mark_output(const Storage* storage) {
  const int32_t id = id_of(storage);
  if (id != kPersistent) trace_.allocs[id].output = true;
}

std::vector<int32_t> Recorder::escaped() const {
  std::vector<int32_t> out;
  for (const auto& [p, id] : live_) {
    if (!trace_.allocs[id].output) out.push_back(id);
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<std::vector<int64_t>> read_producers(const Trace& trace) {
  std::vector<std::vector<int64_t>> out(trace.kernels.size());
  absl::flat_hash_map<uint64_t, int64_t> last_writer;   // Storage::id() -> kernel
  for (size_t k = 0; k < trace.kernels.size(); ++k) {
    const KernelRecord& rec = trace.kernels[k];
    ENCORE_CHECK_CODE(rec.storage_ids.size() == rec.reads.size() + rec.writes.size(), kInternal,
                      "read_producers: kernel %d has %d storage ids for %d operands", k, rec.storage_ids.size(),
                      rec.reads.size() + rec.writes.size());
    for (size_t i = 0; i < rec.reads.size(); ++i) {
      auto it = last_writer.find(rec.storage_ids[i]);
      out[k].push_back(it == last_writer.end() ? -1 : it->second);
    }
    for (size_t i = rec.reads.size(); i < rec.storage_ids.size(); ++i) {
      last_writer[rec.storage_ids[i]] = static_cast<int64_t>(k);
    }
  }
  return out;
}

namespace {

// The fill colour of each phase in the DOT picture (and its legend).
const char* phase_colour(Phase p) {
  switch (p) {
    case Phase::kBackward: return "#f4c7a1";
    case Phase::kOptimizer: return "#b9e0a5";
    case Phase::kForward: break;
  }
  return "#a9c4eb";
}

// NOTE [ DOT dependencies ]: an edge a -> b says kernel b reads a storage
// whose last writer before b is kernel a (read_producers). Storages are
// keyed by Storage::id() (KernelRecord::storage_ids: reads, then writes), so
// a dependency through a parameter, a gradient or optimizer state draws an
// edge as one through an arena temporary does. Each ordered pair of kernels
// gets one edge, labelled with every storage it carries.
struct DotEdges {
  std::vector<std::pair<int64_t, int64_t>> order;                   // first appearance
  absl::flat_hash_map<uint64_t, std::vector<std::string>> labels;   // (from << 32 | to) -> storages
};

uint64_t edge_key(int64_t from, int64_t to) { return (static_cast<uint64_t>(from) << 32) | static_cast<uint64_t>(to); }

DotEdges dot_edges(const Trace& trace) {
  DotEdges edges;
  const std::vector<std::vector<int64_t>> producers = read_producers(trace);
  for (size_t k = 0; k < producers.size(); ++k) {
    for (size_t i = 0; i < producers[k].size(); ++i) {
      const int64_t from = producers[k][i];
      if (from < 0) continue;
      std::vector<std::string>& label = edges.labels[edge_key(from, static_cast<int64_t>(k))];
      if (label.empty()) edges.order.emplace_back(from, static_cast<int64_t>(k));
      const int32_t id = trace.kernels[k].reads[i];
      std::string name = id == kPersistent ? "p" : absl::StrCat("t", id);
      if (std::find(label.begin(), label.end(), name) == label.end()) label.push_back(std::move(name));
    }
  }
  return edges;
}

}  // namespace

absl::Status write_trace_dot(const Trace& trace, const std::string& path) {
  std::string out = "digraph encore {\n  node [shape=box, style=filled, fontname=\"monospace\"];\n";
  out += "  subgraph cluster_legend {\n    label=\"phase\";\n";
  for (Phase p : {Phase::kForward, Phase::kBackward, Phase::kOptimizer}) {
    absl::StrAppend(&out, "    legend_", phase_name(p), " [label=\"", phase_name(p), "\", fillcolor=\"",
                    phase_colour(p), "\"];\n");
  }
  out += "  }\n";
  const auto& kernels = trace.kernels;
  for (size_t k = 0; k < kernels.size(); ++k) {
    absl::StrAppend(&out, "  n", k, " [label=\"", k, ": ", kernels[k].op, "\", fillcolor=\"",
                    phase_colour(kernels[k].phase), "\"];\n");
  }
  const DotEdges edges = dot_edges(trace);
  for (const auto& [from, to] : edges.order) {
    const std::vector<std::string>& label = edges.labels.at(edge_key(from, to));
    absl::StrAppend(&out, "  n", from, " -> n", to, " [label=\"", absl::StrJoin(label, ","), "\"];\n");
  }
  out += "}\n";
  return write_file_atomically("dump_dot", path, out, WriteMode::kAtomicWherePossible);
}

}  // namespace encore::capture_internal
