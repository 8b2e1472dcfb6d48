#include "profile/cuda_profile.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <memory>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

#if ENCORE_HAVE_CUDA
#include <cuda_runtime.h>
#include <cupti.h>

#include "absl/container/flat_hash_map.h"
#include "src/backends/cuda/runtime.h"
#endif

namespace encore::profile_internal {

#if ENCORE_HAVE_CUDA

namespace {

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::string cupti_error(CUptiResult r, const char* what) {
  const char* msg = "unknown CUPTI error";
  cuptiGetResultString(r, &msg);
  return absl::StrFormat("%s: %s (CUPTI error %d)", what, msg, static_cast<int>(r));
}

// What the CUPTI callbacks collect during one time_cuda_replays() call.
// Callbacks may run on CUPTI's own thread: everything is under `mu`.
struct Collected {
  struct Record {
    uint64_t node_id;       // graphNodeId (0: not from a graph launch)
    uint64_t start, end;    // ns, CUPTI clock
  };
  std::mutex mu;
  std::vector<Record> records;
  absl::flat_hash_map<uint64_t, uint64_t> clones;   // captured node id -> instantiated clone's id
  size_t dropped = 0;
};

// Never destroyed: CUPTI may deliver a buffer late (at exit).
Collected& collected() {
  static Collected* c = new Collected();
  return *c;
}

constexpr size_t kBufferBytes = 8 << 20;
constexpr CUpti_ActivityKind kKinds[] = {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMSET,
                                         CUPTI_ACTIVITY_KIND_MEMCPY};

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kBufferBytes));   // CUPTI wants 8-byte alignment
  *size = *buffer != nullptr ? kBufferBytes : 0;                          // 0: CUPTI drops records, counted
  *max_records = 0;
}

void CUPTIAPI buffer_completed(CUcontext ctx, uint32_t stream_id, uint8_t* buffer, size_t, size_t valid) {
  // Parsed without the lock (CUPTI calls may run while on_resource holds it
  // on another thread), appended under it.
  std::vector<Collected::Record> parsed;
  CUpti_Activity* rec = nullptr;
  while (buffer != nullptr && cuptiActivityGetNextRecord(buffer, valid, &rec) == CUPTI_SUCCESS) {
    switch (rec->kind) {
      case CUPTI_ACTIVITY_KIND_KERNEL:
      case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
        const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(rec);
        parsed.push_back({k->graphNodeId, k->start, k->end});
        break;
      }
      case CUPTI_ACTIVITY_KIND_MEMSET: {
        const auto* m = reinterpret_cast<const CUpti_ActivityMemset4*>(rec);
        parsed.push_back({m->graphNodeId, m->start, m->end});
        break;
      }
      case CUPTI_ACTIVITY_KIND_MEMCPY: {
        const auto* m = reinterpret_cast<const CUpti_ActivityMemcpy6*>(rec);
        parsed.push_back({m->graphNodeId, m->start, m->end});
        break;
      }
      default:
        break;
    }
  }
  size_t dropped = 0;
  if (cuptiActivityGetNumDroppedRecords(ctx, stream_id, &dropped) != CUPTI_SUCCESS) dropped = 0;
  std::free(buffer);
  Collected& c = collected();
  std::lock_guard<std::mutex> lock(c.mu);
  c.records.insert(c.records.end(), parsed.begin(), parsed.end());
  c.dropped += dropped;
}

// Resource callback: a node of a graph being instantiated was cloned.
void CUPTIAPI on_resource(void*, CUpti_CallbackDomain domain, CUpti_CallbackId cbid, const void* cbdata) {
  if (domain != CUPTI_CB_DOMAIN_RESOURCE || cbid != CUPTI_CBID_RESOURCE_GRAPHNODE_CLONED || cbdata == nullptr) return;
  const auto* res = static_cast<const CUpti_ResourceData*>(cbdata);
  const auto* g = static_cast<const CUpti_GraphData*>(res->resourceDescriptor);
  if (g == nullptr || g->node == nullptr || g->originalNode == nullptr) return;
  uint64_t clone = 0, original = 0;
  if (cuptiGetGraphNodeId(g->node, &clone) != CUPTI_SUCCESS ||
      cuptiGetGraphNodeId(g->originalNode, &original) != CUPTI_SUCCESS) {
    return;
  }
  Collected& c = collected();
  std::lock_guard<std::mutex> lock(c.mu);
  c.clones[original] = clone;
}

// Activity collection for one call: enables the kinds on start(), and always
// flushes and disables them in stop() or the destructor.
class ActivityScope {
 public:
  // Empty when collecting; otherwise why not.
  std::string start() {
    static const CUptiResult registered = cuptiActivityRegisterCallbacks(&buffer_requested, &buffer_completed);
    if (registered != CUPTI_SUCCESS) return cupti_error(registered, "cuptiActivityRegisterCallbacks");
    {
      Collected& c = collected();
      std::lock_guard<std::mutex> lock(c.mu);
      c.records.clear();
      c.clones.clear();
      c.dropped = 0;
    }
    for (CUpti_ActivityKind kind : kKinds) {
      const CUptiResult r = cuptiActivityEnable(kind);
      if (r == CUPTI_SUCCESS) {
        enabled_.push_back(kind);
      } else if (kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) {
        return cupti_error(r, "cuptiActivityEnable(CONCURRENT_KERNEL) (another profiler holding CUPTI?)");
      }
    }
    return "";
  }
  // Delivers every record (after the caller synchronized) and stops collecting.
  std::string stop() {
    std::string why;
    if (!enabled_.empty()) {
      const CUptiResult r = cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
      if (r != CUPTI_SUCCESS) why = cupti_error(r, "cuptiActivityFlushAll");
    }
    for (CUpti_ActivityKind kind : enabled_) (void)cuptiActivityDisable(kind);
    enabled_.clear();
    return why;
  }
  ~ActivityScope() { (void)stop(); }

 private:
  std::vector<CUpti_ActivityKind> enabled_;
};

// Listens for node clones while a profiling copy of the graph is instantiated.
class CloneListener {
 public:
  // Empty when listening; otherwise why not (then only records that carry
  // the captured nodes' own ids can be mapped).
  std::string start() {
    CUptiResult r = cuptiSubscribe(&subscriber_, &on_resource, nullptr);
    if (r != CUPTI_SUCCESS) {
      subscriber_ = nullptr;
      return cupti_error(r, "cuptiSubscribe (another CUPTI subscriber or tool?)");
    }
    r = cuptiEnableCallback(1, subscriber_, CUPTI_CB_DOMAIN_RESOURCE, CUPTI_CBID_RESOURCE_GRAPHNODE_CLONED);
    if (r != CUPTI_SUCCESS) {
      stop();
      return cupti_error(r, "cuptiEnableCallback(GRAPHNODE_CLONED)");
    }
    return "";
  }
  void stop() {
    if (subscriber_ != nullptr) (void)cuptiUnsubscribe(subscriber_);
    subscriber_ = nullptr;
  }
  ~CloneListener() { stop(); }

 private:
  CUpti_SubscriberHandle subscriber_ = nullptr;
};

// An instantiated, uploaded copy of a captured graph; destroyed after the
// stream is synchronized.
class ProfilingExec {
 public:
  explicit ProfilingExec(cudaStream_t stream) : stream_(stream) {}
  absl::Status instantiate(cudaGraph_t graph) {
    ENCORE_RETURN_IF_CUDA_ERROR(cudaGraphInstantiateWithFlags(&exec_, graph, 0),
                                "profile: cudaGraphInstantiate of the profiling copy");
    ENCORE_RETURN_IF_CUDA_ERROR(cudaGraphUpload(exec_, stream_), "profile: cudaGraphUpload");
    ENCORE_RETURN_IF_CUDA_ERROR(cudaStreamSynchronize(stream_), "profile: waiting for the upload");
    return absl::OkStatus();
  }
  cudaGraphExec_t get() const { return exec_; }
  ~ProfilingExec() {
    if (exec_ == nullptr) return;
    (void)cudaStreamSynchronize(stream_);
    (void)cudaGraphExecDestroy(exec_);
    (void)cudaGetLastError();
  }

 private:
  cudaStream_t stream_;
  cudaGraphExec_t exec_ = nullptr;
};

// Wall time of `runs` replays of the captured graph itself, each synchronized.
absl::Status wall_only(const CudaGraph& graph, cudaStream_t s, int runs, CudaReplayTimes& out) {
  for (int r = 0; r < runs; ++r) {
    const int64_t t0 = now_ns();
    if (absl::Status st = graph.replay(); !st.ok()) return st;
    ENCORE_RETURN_IF_CUDA_ERROR(cudaStreamSynchronize(s), "profile: waiting for a replay");
    out.wall_ns.push_back(now_ns() - t0);
  }
  return absl::OkStatus();
}

// Record node id -> index into `nodes`: the ids of each captured node's
// clones (followed through clones of clones, should instantiation clone
// twice) first, then the captured nodes' own ids.
absl::flat_hash_map<uint64_t, int64_t> node_ids(const std::vector<CudaGraphNode>& nodes,
                                                const absl::flat_hash_map<uint64_t, uint64_t>& clones) {
  constexpr int kMaxCloneDepth = 8;
  absl::flat_hash_map<uint64_t, int64_t> ids;
  std::vector<uint64_t> own(nodes.size(), 0);
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (nodes[i].kind == CudaGraphNode::Kind::kOther) continue;
    if (cuptiGetGraphNodeId(static_cast<CUgraphNode>(nodes[i].handle), &own[i]) != CUPTI_SUCCESS) {
      own[i] = 0;
      continue;
    }
    uint64_t id = own[i];
    for (int depth = 0; depth < kMaxCloneDepth; ++depth) {
      auto it = clones.find(id);
      if (it == clones.end() || it->second == id) break;
      id = it->second;
      ids[id] = static_cast<int64_t>(i);
    }
  }
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (own[i] != 0) ids.try_emplace(own[i], static_cast<int64_t>(i));
  }
  return ids;
}

// The timed replays of the profiling copy, with a CUPTI timestamp window
// around each so records can be told apart by run.
absl::Status timed_runs(cudaGraphExec_t exec, cudaStream_t s, int runs, CudaReplayTimes& out,
                        std::vector<std::pair<uint64_t, uint64_t>>& windows) {
  for (int r = 0; r < runs; ++r) {
    uint64_t w0 = 0, w1 = 0;
    (void)cuptiGetTimestamp(&w0);
    const int64_t t0 = now_ns();
    ENCORE_RETURN_IF_CUDA_ERROR(cudaGraphLaunch(exec, s), "profile: cudaGraphLaunch of the profiling copy");
    ENCORE_RETURN_IF_CUDA_ERROR(cudaStreamSynchronize(s), "profile: waiting for a replay");
    out.wall_ns.push_back(now_ns() - t0);
    (void)cuptiGetTimestamp(&w1);
    windows.emplace_back(w0, w1);
  }
  return absl::OkStatus();
}

// Sorts the collected records into runs. Returns how many were mapped.
size_t assign_records(const absl::flat_hash_map<uint64_t, int64_t>& ids,
                      const std::vector<std::pair<uint64_t, uint64_t>>& windows, CudaReplayTimes& out) {
  Collected& c = collected();
  std::lock_guard<std::mutex> lock(c.mu);
  out.runs.assign(windows.size(), {});
  size_t mapped = 0;
  for (const Collected::Record& rec : c.records) {
    if (rec.node_id == 0 || (rec.start == 0 && rec.end == 0) || rec.end < rec.start) continue;
    auto id = ids.find(rec.node_id);
    if (id == ids.end()) continue;
    // The last window opened at or before the record's start (windows are in time order).
    auto after = std::upper_bound(windows.begin(), windows.end(), rec.start,
                                  [](uint64_t t, const std::pair<uint64_t, uint64_t>& w) { return t < w.first; });
    if (after == windows.begin()) continue;
    const size_t r = static_cast<size_t>(after - windows.begin()) - 1;
    if (rec.start > windows[r].second) continue;
    out.runs[r].push_back({id->second, static_cast<int64_t>(rec.start), static_cast<int64_t>(rec.end)});
    ++mapped;
  }
  for (std::vector<NodeActivity>& run : out.runs) {
    std::sort(run.begin(), run.end(), [](const NodeActivity& a, const NodeActivity& b) {
      return a.start_ns != b.start_ns ? a.start_ns < b.start_ns : a.node < b.node;
    });
  }
  return mapped;
}

// Fallback when no record carries a known node id: a graph captured from one
// stream is a chain, so in each run the k-th activity (by start time) is the
// k-th kernel/memset/memcpy node in launch order. Used only when every run
// has exactly that many activities. Returns whether it applied.
bool assign_by_order(const std::vector<std::pair<uint64_t, uint64_t>>& windows, CudaReplayTimes& out) {
  std::vector<int64_t> work;
  for (size_t i = 0; i < out.nodes.size(); ++i) {
    if (out.nodes[i].kind != CudaGraphNode::Kind::kOther) work.push_back(static_cast<int64_t>(i));
  }
  if (work.empty()) return false;
  Collected& c = collected();
  std::lock_guard<std::mutex> lock(c.mu);
  std::vector<std::vector<NodeActivity>> runs(windows.size());
  for (const Collected::Record& rec : c.records) {
    if ((rec.start == 0 && rec.end == 0) || rec.end < rec.start) continue;
    for (size_t r = 0; r < windows.size(); ++r) {
      if (rec.start >= windows[r].first && rec.start <= windows[r].second) {
        runs[r].push_back({-1, static_cast<int64_t>(rec.start), static_cast<int64_t>(rec.end)});
        break;
      }
    }
  }
  for (std::vector<NodeActivity>& run : runs) {
    if (run.size() != work.size()) return false;
    std::sort(run.begin(), run.end(), [](const NodeActivity& a, const NodeActivity& b) { return a.start_ns < b.start_ns; });
    for (size_t k = 0; k < run.size(); ++k) run[k].node = work[k];
  }
  out.runs = std::move(runs);
  return true;
}

size_t records_seen() {
  Collected& c = collected();
  std::lock_guard<std::mutex> lock(c.mu);
  return c.records.size();
}

// Sorts the collected records of the timed runs (`windows`) into out.runs by
// node: by the clone map's node ids, else by order (assign_by_order); else
// says why in out.unavailable. `clone_why`: why no clones were listened for.
void map_records(const std::vector<std::pair<uint64_t, uint64_t>>& windows, const std::string& clone_why,
                 CudaReplayTimes& out) {
  absl::flat_hash_map<uint64_t, uint64_t> clones;
  {
    Collected& c = collected();
    std::lock_guard<std::mutex> lock(c.mu);
    clones = c.clones;
  }
  if (assign_records(node_ids(out.nodes, clones), windows, out) > 0) return;
  const std::string why = absl::StrFormat(
      "CUPTI delivered %d activity records (%d clones seen), none with a node id of this graph's timed replays%s",
      records_seen(), clones.size(), clone_why.empty() ? "" : absl::StrCat("; ", clone_why));
  if (assign_by_order(windows, out)) {
    out.note = absl::StrCat(why, ": nodes matched to records by order instead (one-stream chain)");
  } else {
    out.unavailable = why;
    out.runs.clear();
  }
}

}  // namespace

absl::StatusOr<CudaReplayTimes> time_cuda_replays(const CudaGraph& graph, int runs) {
  static std::mutex one_at_a_time;
  std::lock_guard<std::mutex> lock(one_at_a_time);
  if (runs < 1) return absl::InvalidArgumentError("time_cuda_replays: runs must be >= 1");
  const cudaStream_t s = cuda::stream_for(graph.device().index);
  ENCORE_RETURN_IF_CUDA_ERROR(cudaStreamSynchronize(s), "profile: waiting for earlier work");
  CudaReplayTimes out;
  absl::StatusOr<std::vector<CudaGraphNode>> nodes = graph.launch_nodes();
  if (!nodes.ok()) {
    out.unavailable = std::string(nodes.status().message());
    if (absl::Status st = wall_only(graph, s, runs, out); !st.ok()) return st;
    return out;
  }
  out.nodes = *std::move(nodes);
  ActivityScope activity;
  if (std::string why = activity.start(); !why.empty()) {
    out.unavailable = why;
    if (absl::Status st = wall_only(graph, s, runs, out); !st.ok()) return st;
    return out;
  }
  ProfilingExec exec(s);
  std::string clone_why;
  {
    CloneListener listener;
    clone_why = listener.start();
    if (absl::Status st = exec.instantiate(static_cast<cudaGraph_t>(graph.graph_handle())); !st.ok()) return st;
  }
  std::vector<std::pair<uint64_t, uint64_t>> windows;
  if (absl::Status st = timed_runs(exec.get(), s, runs, out, windows); !st.ok()) return st;
  if (std::string why = activity.stop(); !why.empty()) {
    out.unavailable = why;
    out.runs.clear();
    return out;
  }
  map_records(windows, clone_why, out);
  return out;
}

// ---- CudaLaunchTimer ----

CudaLaunchTimer::~CudaLaunchTimer() {
  for (void* e : events_) (void)cudaEventDestroy(static_cast<cudaEvent_t>(e));
}

void CudaLaunchTimer::record() {
  if (used_ == events_.size()) {
    cudaEvent_t e = nullptr;
    cuda::check(cudaEventCreateWithFlags(&e, cudaEventDefault), "profile: cudaEventCreate");
    events_.push_back(e);
  }
  cuda::check(cudaEventRecord(static_cast<cudaEvent_t>(events_[used_]), cuda::stream_for(device_.index)),
              "profile: cudaEventRecord");
  ++used_;
}

void CudaLaunchTimer::before_launch() { record(); }
void CudaLaunchTimer::after_launch() { record(); }

absl::Status CudaLaunchTimer::read(std::vector<std::pair<int64_t, int64_t>>& times) const {
  times.clear();
  if (used_ == 0) return absl::OkStatus();
  ENCORE_RETURN_IF_CUDA_ERROR(cudaStreamSynchronize(cuda::stream_for(device_.index)), "profile: waiting for the step");
  const cudaEvent_t first = static_cast<cudaEvent_t>(events_[0]);
  auto since_first = [&](size_t i, int64_t& ns) -> absl::Status {
    float ms = 0;
    ENCORE_RETURN_IF_CUDA_ERROR(cudaEventElapsedTime(&ms, first, static_cast<cudaEvent_t>(events_[i])),
                                "profile: cudaEventElapsedTime");
    ns = std::llround(static_cast<double>(ms) * 1e6);
    return absl::OkStatus();
  };
  for (size_t i = 0; i + 1 < used_; i += 2) {
    int64_t start = 0, end = 0;
    if (absl::Status st = since_first(i, start); !st.ok()) return st;
    if (absl::Status st = since_first(i + 1, end); !st.ok()) return st;
    times.emplace_back(start, std::max(start, end));
  }
  return absl::OkStatus();
}

#else  // !ENCORE_HAVE_CUDA

absl::StatusOr<CudaReplayTimes> time_cuda_replays(const CudaGraph&, int) {
  return absl::UnimplementedError("time_cuda_replays: encore was built without CUDA");
}
CudaLaunchTimer::~CudaLaunchTimer() = default;
void CudaLaunchTimer::record() {}
void CudaLaunchTimer::before_launch() {}
void CudaLaunchTimer::after_launch() {}
absl::Status CudaLaunchTimer::read(std::vector<std::pair<int64_t, int64_t>>& times) const {
  times.clear();
  return absl::UnimplementedError("CudaLaunchTimer: encore was built without CUDA");
}

#endif

}  // namespace encore::profile_internal
