#include "capture/recorder.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "capture/launch_match.h"
#include "encore/tensor.h"

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

absl::Status write_trace_dot(const Trace& trace, const std::string& path) {
  std::ofstream out(path);
  if (!out) return absl::NotFoundError(absl::StrCat("dump_dot: cannot open ", path, ": ", std::strerror(errno)));
  out << "digraph encore {\n  node [shape=box, fontname=\"monospace\"];\n";
  absl::flat_hash_map<int32_t, size_t> last_writer;   // temporary id -> kernel
  const auto& kernels = trace.kernels;
  for (size_t k = 0; k < kernels.size(); ++k) {
    out << "  n" << k << " [label=\"" << k << ": " << kernels[k].op << "\"];\n";
    for (int32_t id : kernels[k].reads) {
      auto it = last_writer.find(id);
      if (id != kPersistent && it != last_writer.end()) {
        out << "  n" << it->second << " -> n" << k << " [label=\"t" << id << "\"];\n";
      }
    }
    for (int32_t id : kernels[k].writes) {
      if (id != kPersistent) last_writer[id] = k;
    }
  }
  out << "}\n";
  out.close();   // a full disk shows at the last flush, not at the writes into the buffer
  return out ? absl::OkStatus() : absl::DataLossError(absl::StrCat("dump_dot: write to ", path, " failed"));
}

}  // namespace encore::capture_internal
