#include "capture/cuda_graph.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "capture/executable.h"
#include "encore/error.h"
#include "src/core/atomic_file.h"
#include "src/core/kernel_errors.h"

#if ENCORE_HAVE_CUDA
#include <cuda_runtime.h>

#include "absl/container/flat_hash_map.h"
#include "src/backends/cuda/runtime.h"
#endif

namespace encore::capture_internal {

struct CaptureMarks;   // the launch marks of one capture (CUDA builds)

// Runs the capture run under stream capture on encore's stream of `device`
// (NOTE [ CUDA graph nodes and encore launches ] for take()'s marks).
class CudaCapturer final : public Capturer {
 public:
  CudaCapturer(Device device, bool programmatic_launch);
  ~CudaCapturer() override;
  bool take(const LaunchRecord& launch) override;
  void reuse(std::unique_ptr<Executable> previous) override { previous_ = std::move(previous); }
  absl::StatusOr<std::unique_ptr<Executable>> capture(const std::function<void()>& run) override;
  bool updated() const override { return updated_; }
  int64_t instantiate_ns() const override { return instantiate_ns_; }

 private:
  // Begins capturing encore's stream of the device after waiting for the
  // work already queued on it (the warm-up's). With programmatic launch (and
  // a GPU of compute capability >= 9.0) encore's kernels are captured with
  // programmatic edges (NOTE [ Programmatic dependent launch ] in
  // src/backends/cuda/launch.h) until end(). Without CUDA: Unimplemented.
  [[nodiscard]] absl::Status begin();
  // Ends the capture begun by begin(). When `run` (what the captured step
  // returned) failed, or capture broke (a synchronize, a legacy-stream call),
  // the partial graph is dropped, the stream is left usable, and the error is
  // returned. Otherwise reuse()'s executable is updated to the new graph
  // (cudaGraphExecUpdate) or, where there is none or the driver refuses, the
  // graph is instantiated; then uploaded.
  [[nodiscard]] absl::StatusOr<std::unique_ptr<CudaGraph>> end(absl::Status run);

  const Device device_;
  const bool programmatic_launch_;
  std::unique_ptr<CaptureMarks> marks_;   // between begin() and end()
  std::unique_ptr<Executable> previous_;  // reuse()'s
  bool updated_ = false;
  int64_t instantiate_ns_ = 0;
};

#if ENCORE_HAVE_CUDA

namespace {

cudaGraph_t as_graph(void* p) { return static_cast<cudaGraph_t>(p); }
cudaGraphExec_t as_exec(void* p) { return static_cast<cudaGraphExec_t>(p); }

}  // namespace

// The launch marks of one capture (NOTE [ CUDA graph nodes and encore launches ]).
struct CaptureMarks {
  cudaStream_t stream = nullptr;
  std::vector<void*> leaves;   // every mark's leaf nodes, back to back
  std::vector<int64_t> ends;   // ends[m]: leaves.size() after mark m
  bool lost = false;           // a query failed: the marks cannot be trusted
};

namespace {

void take_mark(CaptureMarks& m) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  const cudaGraphNode_t* deps = nullptr;
  const cudaGraphEdgeData* edges = nullptr;   // asked for, so that annotated edges are no "lossy query"
  size_t n = 0;
  const cudaError_t err = cudaStreamGetCaptureInfo(m.stream, &status, nullptr, nullptr, &deps, &edges, &n);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();   // or the next launch's check would report it as its own
    m.lost = true;
    return;
  }
  if (status != cudaStreamCaptureStatusActive) {   // capture broke; end() reports it
    m.lost = true;
    return;
  }
  m.leaves.insert(m.leaves.end(), deps, deps + n);
  m.ends.push_back(static_cast<int64_t>(m.leaves.size()));
}

CudaGraphNode::Kind kind_of(cudaGraphNode_t node) {
  cudaGraphNodeType type = cudaGraphNodeTypeEmpty;
  if (cudaGraphNodeGetType(node, &type) != cudaSuccess) {
    (void)cudaGetLastError();
    return CudaGraphNode::Kind::kOther;
  }
  switch (type) {
    case cudaGraphNodeTypeKernel: return CudaGraphNode::Kind::kKernel;
    case cudaGraphNodeTypeMemset: return CudaGraphNode::Kind::kMemset;
    case cudaGraphNodeTypeMemcpy: return CudaGraphNode::Kind::kMemcpy;
    default: return CudaGraphNode::Kind::kOther;
  }
}

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch()).count();
}

// The error of a capture that `run` (the step) failed or that broke; the
// partial `graph` (if any) is dropped and the stream left usable.
absl::Status failed_capture(absl::Status run, cudaError_t ended, cudaGraph_t graph) {
  if (graph != nullptr) cudaGraphDestroy(graph);
  (void)cudaGetLastError();   // an invalidated capture leaves a non-sticky error behind
  constexpr const char* kBroken =
      "something in the step broke stream capture: a synchronize, a cudaMalloc or a call on the legacy default "
      "stream";
  if (!run.ok() && ended == cudaErrorStreamCaptureInvalidated) {
    // The step's error is then most likely the first launch after the break, not its cause.
    return absl::Status(run.code(), absl::StrCat(run.message(), " (stream capture had been invalidated: ",
                                                 kBroken, ")"));
  }
  if (!run.ok()) return run;
  const absl::Status end_status = cuda::cuda_status(ended, "capture: cudaStreamEndCapture");
  return absl::Status(end_status.code(), absl::StrCat(end_status.message(), " (", kBroken, ")"));
}

}  // namespace

absl::Status CudaCapturer::begin() {
  const cudaStream_t s = cuda::stream_for(device_.index);
  ENCORE_RETURN_IF_CUDA_ERROR(cudaStreamSynchronize(s), "capture: waiting for the warm-up");
  // Programmatic launch only where the GPU supports it and the kernels were
  // built to wait (asked before capture begins: no API call inside it).
  int major = 0;
  if (programmatic_launch_) {
    ENCORE_RETURN_IF_CUDA_ERROR(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device_.index),
                                "capture: cudaDeviceGetAttribute(compute capability)");
  }
  const bool programmatic = programmatic_launch_ && major >= 9 && cuda::kernels_wait_for_predecessors();
  // Thread-local mode: other threads may keep using CUDA, but an unsafe call
  // (cudaMalloc, a synchronize) from this thread breaks the capture.
  ENCORE_RETURN_IF_CUDA_ERROR(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal),
                              "capture: cudaStreamBeginCapture");
  marks_ = std::make_unique<CaptureMarks>();
  marks_->stream = s;
  cuda::set_programmatic_launch(programmatic);   // until end()
  return absl::OkStatus();
}

bool CudaCapturer::take(const LaunchRecord&) {
  if (marks_ != nullptr) take_mark(*marks_);   // where the previous launch ended
  return true;                                 // runs into the capturing stream
}

absl::StatusOr<std::unique_ptr<CudaGraph>> CudaCapturer::end(absl::Status run) {
  const cudaStream_t s = cuda::stream_for(device_.index);
  std::unique_ptr<CaptureMarks> marks = std::move(marks_);   // this capture's, whatever happens next
  cuda::set_programmatic_launch(false);
  if (marks != nullptr && run.ok()) take_mark(*marks);        // where the last launch ended
  cudaGraph_t graph = nullptr;
  const cudaError_t ended = cudaStreamEndCapture(s, &graph);
  if (!run.ok() || ended != cudaSuccess) return failed_capture(std::move(run), ended, graph);
  std::unique_ptr<CudaGraph> g(new CudaGraph());
  g->device_ = device_;
  g->graph_ = graph;
  if (marks != nullptr) {
    g->marks_ = std::move(marks->leaves);
    g->mark_ends_ = std::move(marks->ends);
    g->marks_lost_ = marks->lost;
  } else {
    g->marks_lost_ = true;
  }
  size_t nodes = 0;
  ENCORE_RETURN_IF_CUDA_ERROR(cudaGraphGetNodes(graph, nullptr, &nodes), "capture: cudaGraphGetNodes");
  g->nodes_ = static_cast<int64_t>(nodes);
  const int64_t t0 = now_ns();
  cudaGraphExec_t exec = nullptr;
  if (std::unique_ptr<CudaGraph> old = previous_ ? previous_->take_cuda_graph() : nullptr;
      old != nullptr && old->exec_ != nullptr) {
    cudaGraphExecUpdateResultInfo info{};
    if (cudaGraphExecUpdate(as_exec(old->exec_), graph, &info) == cudaSuccess) {
      exec = as_exec(old->exec_);
      old->exec_ = nullptr;   // now g's; old's graph is destroyed with it
      updated_ = true;
    } else {
      (void)cudaGetLastError();   // a refused update leaves a non-sticky error; instantiate instead
    }
  }
  previous_.reset();
  if (exec == nullptr) {
    ENCORE_RETURN_IF_CUDA_ERROR(cudaGraphInstantiateWithFlags(&exec, graph, 0), "capture: cudaGraphInstantiate");
  }
  g->exec_ = exec;
  ENCORE_RETURN_IF_CUDA_ERROR(cudaGraphUpload(exec, s), "capture: cudaGraphUpload");
  ENCORE_RETURN_IF_CUDA_ERROR(cudaStreamSynchronize(s), "capture: waiting for the upload");
  instantiate_ns_ = now_ns() - t0;
  return g;
}

CudaGraph::~CudaGraph() {
  if (exec_ != nullptr) cudaGraphExecDestroy(as_exec(exec_));
  if (graph_ != nullptr) cudaGraphDestroy(as_graph(graph_));
}

absl::Status CudaGraph::replay() const {
  ENCORE_RETURN_IF_CUDA_ERROR(cudaGraphLaunch(as_exec(exec_), cuda::stream_for(device_.index)),
                              "replay: cudaGraphLaunch");
  return absl::OkStatus();
}

// The runtime writes the file by name: the temporary's (or, in place, the
// path's), whole or not at all as the CPU's DOT (src/core/atomic_file.h).
absl::Status CudaGraph::dump_dot(const std::string& path) const {
  auto print = [&](int, const std::string& file) -> absl::Status {
    ENCORE_RETURN_IF_CUDA_ERROR(
        cudaGraphDebugDotPrint(as_graph(graph_), file.c_str(), cudaGraphDebugDotFlagsVerbose), "dump_dot");
    return absl::OkStatus();
  };
  absl::StatusOr<StagedFile> staged = stage_file("dump_dot", path, print, WriteMode::kAtomicWherePossible);
  return staged.ok() ? staged->commit() : staged.status();
}

namespace {

// The nodes of `graph` and each one's predecessors, as indices into `nodes`
// in compressed rows: node v's are preds[first[v] .. first[v + 1]).
struct GraphIndex {
  std::vector<cudaGraphNode_t> nodes;
  absl::flat_hash_map<cudaGraphNode_t, int32_t> index;   // node -> position in nodes
  std::vector<int64_t> first;
  std::vector<int32_t> preds;
};

absl::StatusOr<GraphIndex> index_graph(cudaGraph_t graph) {
  GraphIndex g;
  size_t n = 0, ne = 0;
  ENCORE_RETURN_IF_CUDA_ERROR(cudaGraphGetNodes(graph, nullptr, &n), "launch_nodes: cudaGraphGetNodes");
  g.nodes.resize(n);
  if (n > 0) ENCORE_RETURN_IF_CUDA_ERROR(cudaGraphGetNodes(graph, g.nodes.data(), &n), "launch_nodes: cudaGraphGetNodes");
  g.nodes.resize(n);
  ENCORE_RETURN_IF_CUDA_ERROR(cudaGraphGetEdges(graph, nullptr, nullptr, nullptr, &ne), "launch_nodes: cudaGraphGetEdges");
  std::vector<cudaGraphNode_t> from(ne), to(ne);
  std::vector<cudaGraphEdgeData> edge_data(ne);
  if (ne > 0) {
    ENCORE_RETURN_IF_CUDA_ERROR(cudaGraphGetEdges(graph, from.data(), to.data(), edge_data.data(), &ne),
                                "launch_nodes: cudaGraphGetEdges");
  }
  g.index.reserve(n);
  for (size_t i = 0; i < n; ++i) g.index[g.nodes[i]] = static_cast<int32_t>(i);
  g.first.assign(n + 1, 0);
  g.preds.resize(ne);
  std::vector<std::pair<int32_t, int32_t>> e;   // (to, from) as indices
  e.reserve(ne);
  for (size_t k = 0; k < ne; ++k) {
    auto f = g.index.find(from[k]), t = g.index.find(to[k]);
    if (f != g.index.end() && t != g.index.end()) e.emplace_back(t->second, f->second);
  }
  for (const auto& [t, f] : e) ++g.first[t + 1];
  for (size_t v = 0; v < n; ++v) g.first[v + 1] += g.first[v];
  std::vector<int64_t> fill(g.first.begin(), g.first.end() - 1);
  for (const auto& [t, f] : e) g.preds[fill[t]++] = f;
  return g;
}

}  // namespace

absl::StatusOr<std::vector<CudaGraphNode>> CudaGraph::launch_nodes() const {
  if (marks_lost_) {
    return absl::FailedPreconditionError("CUDA graph: the launch marks taken during capture were lost "
                                         "(cudaStreamGetCaptureInfo failed): nodes cannot be mapped to ops");
  }
  cuda::set_device(device_.index);
  absl::StatusOr<GraphIndex> indexed = index_graph(as_graph(graph_));
  if (!indexed.ok()) return indexed.status();
  const GraphIndex& g = *indexed;
  const size_t n = g.nodes.size();
  // Post-order walk back from each mark: a node is emitted after its
  // predecessors, so each launch's nodes come in dependency order.
  enum : uint8_t { kNew, kOnStack, kDone };
  std::vector<uint8_t> state(n, kNew);
  std::vector<CudaGraphNode> out;
  out.reserve(n);
  std::vector<std::pair<int32_t, int64_t>> stack;   // (node, next predecessor position)
  for (size_t m = 1; m < mark_ends_.size(); ++m) {
    const int64_t launch = static_cast<int64_t>(m) - 1;
    for (int64_t j = mark_ends_[m - 1]; j < mark_ends_[m]; ++j) {
      auto root = g.index.find(static_cast<cudaGraphNode_t>(marks_[j]));
      if (root == g.index.end() || state[root->second] != kNew) continue;
      state[root->second] = kOnStack;
      stack.emplace_back(root->second, g.first[root->second]);
      while (!stack.empty()) {
        auto& [v, pos] = stack.back();
        if (pos < g.first[v + 1]) {
          const int32_t u = g.preds[pos++];
          if (state[u] == kNew) {
            state[u] = kOnStack;
            stack.emplace_back(u, g.first[u]);   // may move `stack`: v and pos are not used after this
          }
          continue;
        }
        state[v] = kDone;
        out.push_back({g.nodes[v], launch, kind_of(g.nodes[v])});
        stack.pop_back();
      }
    }
  }
  for (size_t v = 0; v < n; ++v) {
    if (state[v] == kNew) out.push_back({g.nodes[v], -1, kind_of(g.nodes[v])});
  }
  return out;
}

namespace {

// A kernel node parameter that holds a given pointer, with a copy of the
// node's parameters in which it holds another.
struct PointerParam {
  cudaGraphNode_t node = nullptr;
  cudaKernelNodeParams original{};   // the node's own (its argument values are owned by the node)
  std::vector<std::vector<char>> values;   // copies of every argument, the pointer replaced
  std::vector<void*> args;                 // into values
};

// Fills `p` when one of `node`'s kernel arguments holds `from` (aligned
// 8-byte words of each argument are compared). Returns false otherwise, or
// when the kernel's parameter layout is unknown (cudaFuncGetParamInfo).
// What a fruitless search saw, for its error message (the first GPU run must
// say why, not only that, it found nothing).
struct PointerScan {
  int kernels = 0;                                  // kernel nodes looked at
  int without_params = 0;                           // of which GetParams failed or gave no kernelParams
  int unknown_layout = 0;                           // of which cudaFuncGetParamInfo refused parameter 0
  cudaError_t get_params_error = cudaSuccess;       // the first such error
  cudaError_t param_info_error = cudaSuccess;
};

bool find_pointer_param(cudaGraphNode_t node, const void* from, const void* to, PointerParam& p, PointerScan& scan) {
  ++scan.kernels;
  cudaKernelNodeParams params{};
  const cudaError_t got = cudaGraphKernelNodeGetParams(node, &params);
  if (got != cudaSuccess || params.kernelParams == nullptr) {
    (void)cudaGetLastError();
    ++scan.without_params;
    if (scan.get_params_error == cudaSuccess) scan.get_params_error = got;
    return false;
  }
  std::vector<std::vector<char>> values;
  bool found = false;
  for (size_t i = 0; i < 1024; ++i) {
    size_t offset = 0, size = 0;
    const cudaError_t info = cudaFuncGetParamInfo(params.func, i, &offset, &size);
    if (info != cudaSuccess) {
      (void)cudaGetLastError();   // past the last parameter (or an unknown layout: then nothing matched)
      if (i == 0) {
        ++scan.unknown_layout;
        if (scan.param_info_error == cudaSuccess) scan.param_info_error = info;
      }
      break;
    }
    const char* bytes = static_cast<const char*>(params.kernelParams[i]);
    std::vector<char> v(bytes, bytes + size);
    for (size_t b = 0; b + sizeof(void*) <= size; b += sizeof(void*)) {
      const void* word = nullptr;
      std::memcpy(&word, v.data() + b, sizeof(word));
      if (word == from) {
        std::memcpy(v.data() + b, &to, sizeof(to));
        found = true;
      }
    }
    values.push_back(std::move(v));
  }
  if (!found) return false;
  p.node = node;
  p.original = params;
  p.values = std::move(values);
  for (std::vector<char>& v : p.values) p.args.push_back(v.data());
  return true;
}

// Times cudaGraphExecKernelNodeSetParams moving `p`'s node of `exec` to the
// other pointer and back, `reps` times each way: the median ns of one call.
// The node ends with its original parameters.
absl::StatusOr<int64_t> median_retarget_ns(cudaGraphExec_t exec, PointerParam& p, int reps) {
  cudaKernelNodeParams moved = p.original;
  moved.kernelParams = p.args.data();
  moved.extra = nullptr;
  std::vector<int64_t> ns;
  ns.reserve(2 * static_cast<size_t>(reps));
  for (int r = 0; r < reps; ++r) {
    const int64_t t0 = now_ns();
    const cudaError_t to_err = cudaGraphExecKernelNodeSetParams(exec, p.node, &moved);
    const int64_t t1 = now_ns();
    const cudaError_t back_err = cudaGraphExecKernelNodeSetParams(exec, p.node, &p.original);
    const int64_t t2 = now_ns();
    ENCORE_RETURN_IF_CUDA_ERROR(to_err, "update_pointer_ns: cudaGraphExecKernelNodeSetParams");
    ENCORE_RETURN_IF_CUDA_ERROR(back_err, "update_pointer_ns: cudaGraphExecKernelNodeSetParams (restoring)");
    ns.push_back(t1 - t0);
    ns.push_back(t2 - t1);
  }
  std::nth_element(ns.begin(), ns.begin() + static_cast<std::ptrdiff_t>(ns.size() / 2), ns.end());
  return ns[ns.size() / 2];
}

}  // namespace

absl::StatusOr<int64_t> CudaGraph::update_pointer_ns(const void* from, const void* to, int reps) const {
  if (reps < 1) return absl::InvalidArgumentError("update_pointer_ns: reps must be >= 1");
  const cudaStream_t s = cuda::stream_for(device_.index);
  ENCORE_RETURN_IF_CUDA_ERROR(cudaStreamSynchronize(s), "update_pointer_ns: waiting for the stream");
  absl::StatusOr<std::vector<CudaGraphNode>> nodes = launch_nodes();
  std::vector<cudaGraphNode_t> kernels;
  if (nodes.ok()) {
    for (const CudaGraphNode& n : *nodes) {
      if (n.kind == CudaGraphNode::Kind::kKernel) kernels.push_back(static_cast<cudaGraphNode_t>(n.handle));
    }
  } else {   // no launch order: any order will do to find the pointer
    size_t n = 0;
    ENCORE_RETURN_IF_CUDA_ERROR(cudaGraphGetNodes(as_graph(graph_), nullptr, &n), "update_pointer_ns");
    kernels.resize(n);
    if (n > 0) ENCORE_RETURN_IF_CUDA_ERROR(cudaGraphGetNodes(as_graph(graph_), kernels.data(), &n), "update_pointer_ns");
  }
  PointerParam p;
  PointerScan scan;
  bool found = false;
  for (cudaGraphNode_t k : kernels) {
    if (kind_of(k) == CudaGraphNode::Kind::kKernel && find_pointer_param(k, from, to, p, scan)) {
      found = true;
      break;
    }
  }
  if (!found) {
    return absl::NotFoundError(absl::StrFormat(
        "update_pointer_ns: no kernel node of the graph has a parameter holding the given pointer: %d kernel "
        "nodes scanned, %d without parameters (first cudaGraphKernelNodeGetParams error: %s), %d whose layout "
        "cudaFuncGetParamInfo refused (first error: %s)",
        scan.kernels, scan.without_params, cudaGetErrorName(scan.get_params_error), scan.unknown_layout,
        cudaGetErrorName(scan.param_info_error)));
  }
  return median_retarget_ns(as_exec(exec_), p, reps);
}

#else  // !ENCORE_HAVE_CUDA

struct CaptureMarks {};

absl::Status CudaCapturer::begin() {
  return absl::UnimplementedError(
      absl::StrCat("capture: the step runs on ", device_.str(), ", but encore was built without CUDA"));
}
bool CudaCapturer::take(const LaunchRecord&) { return true; }
absl::StatusOr<std::unique_ptr<CudaGraph>> CudaCapturer::end(absl::Status run) {
  return run.ok() ? absl::UnimplementedError("capture: encore was built without CUDA") : run;
}
CudaGraph::~CudaGraph() = default;
absl::Status CudaGraph::replay() const { return absl::UnimplementedError("replay: built without CUDA"); }
absl::Status CudaGraph::dump_dot(const std::string&) const {
  return absl::UnimplementedError("dump_dot: built without CUDA");
}
absl::StatusOr<std::vector<CudaGraphNode>> CudaGraph::launch_nodes() const {
  return absl::UnimplementedError("launch_nodes: built without CUDA");
}
absl::StatusOr<int64_t> CudaGraph::update_pointer_ns(const void*, const void*, int) const {
  return absl::UnimplementedError("update_pointer_ns: built without CUDA");
}

#endif

// ---- both builds ----

std::unique_ptr<CudaGraph> Executable::take_cuda_graph() { return nullptr; }

namespace {

class CudaExecutable final : public Executable {
 public:
  explicit CudaExecutable(std::unique_ptr<CudaGraph> graph) : graph_(std::move(graph)) {}

  // Every error here means not launched: the graph is asynchronous, so its
  // own bad-data reports arrive later (NOTE [ A replay that ran ]).
  ReplayResult replay() override {
    // This replay's reports arrive at the next synchronization, or here at
    // the next replay if it has finished by then.
    if (const uint32_t errors = take_kernel_errors(graph_->device(), /*wait=*/false); errors != 0) {
      return {absl::InvalidArgumentError(absl::StrCat(
                  "replay: an earlier replay or step on ", graph_->device().str(), " met bad data: ",
                  describe_kernel_errors(errors),
                  "; its outputs, gradients and parameter updates used it: check the batches copied into the "
                  "static inputs. This replay was not launched")),
              /*ran=*/false};
    }
    absl::Status launched = graph_->replay();
    const bool ran = launched.ok();
    return {std::move(launched), ran};
  }
  ReplayResult replay_timed(std::vector<int64_t>&) override {
    return {absl::UnimplementedError("replay_timed: per-node host timing is for CPU graphs; time CUDA graphs "
                                     "with CUPTI or events"),
            /*ran=*/false};
  }
  absl::Status dump_dot(const std::string& path, const Trace&) const override { return graph_->dump_dot(path); }
  const CudaGraph* cuda_graph() const override { return graph_.get(); }
  std::unique_ptr<CudaGraph> take_cuda_graph() override { return std::move(graph_); }

 private:
  std::unique_ptr<CudaGraph> graph_;
};

}  // namespace

CudaCapturer::CudaCapturer(Device device, bool programmatic_launch)
    : device_(device), programmatic_launch_(programmatic_launch) {}
CudaCapturer::~CudaCapturer() = default;

absl::StatusOr<std::unique_ptr<Executable>> CudaCapturer::capture(const std::function<void()>& run) {
  if (absl::Status s = begin(); !s.ok()) return s;
  absl::StatusOr<std::unique_ptr<CudaGraph>> graph = end(status_of(run));
  if (!graph.ok()) return graph.status();
  return std::make_unique<CudaExecutable>(*std::move(graph));
}

std::unique_ptr<Capturer> make_cuda_capturer(Device device, bool programmatic_launch) {
  return std::make_unique<CudaCapturer>(device, programmatic_launch);
}

}  // namespace encore::capture_internal
