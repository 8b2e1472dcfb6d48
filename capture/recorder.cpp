#include "capture/recorder.h"

#include <algorithm>

#include "encore/tensor.h"

namespace encore::capture_internal {

int32_t Recorder::id_of(const Storage* s) const {
  auto it = live_.find(s->data());
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
  for (int32_t id : rec.reads) touch(id, k);
  for (int32_t id : rec.writes) touch(id, k);
  trace_.kernels.push_back(std::move(rec));
  return true;   // warm-up steps really run
}

void Recorder::on_host_access(const char* op) {
  if (first_host_access_ != nullptr) return;
  first_host_access_ = op;
  kernels_before_host_access_ = static_cast<int64_t>(trace_.kernels.size());
}

void Recorder::on_allocate(void* p, int64_t nbytes, Device device) {
  live_[p] = static_cast<int32_t>(trace_.allocs.size());
  AllocRecord a;
  a.nbytes = nbytes;
  a.device = device;
  a.allocated_at = static_cast<int64_t>(trace_.kernels.size());
  trace_.allocs.push_back(a);
}

void Recorder::on_free(void* p) {
  auto it = live_.find(p);
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

}  // namespace encore::capture_internal
