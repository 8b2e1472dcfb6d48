#include "capture/cuda_graph.h"

#include "absl/strings/str_cat.h"

#if ENCORE_HAVE_CUDA
#include <cuda_runtime.h>

#include "src/backends/cuda/runtime.h"
#endif

namespace encore::capture_internal {

#if ENCORE_HAVE_CUDA

namespace {
cudaGraph_t as_graph(void* p) { return static_cast<cudaGraph_t>(p); }
cudaGraphExec_t as_exec(void* p) { return static_cast<cudaGraphExec_t>(p); }
}  // namespace

absl::Status CudaGraph::begin(Device device) {
  const cudaStream_t s = cuda::stream_for(device.index);
  ENCORE_RETURN_IF_CUDA_ERROR(cudaStreamSynchronize(s), "capture: waiting for the warm-up");
  // Thread-local mode: other threads may keep using CUDA, but an unsafe call
  // (cudaMalloc, a synchronize) from this thread breaks the capture.
  ENCORE_RETURN_IF_CUDA_ERROR(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal),
                              "capture: cudaStreamBeginCapture");
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<CudaGraph>> CudaGraph::end(Device device, absl::Status run) {
  const cudaStream_t s = cuda::stream_for(device.index);
  cudaGraph_t graph = nullptr;
  const cudaError_t ended = cudaStreamEndCapture(s, &graph);
  if (!run.ok() || ended != cudaSuccess) {
    if (graph != nullptr) cudaGraphDestroy(graph);
    (void)cudaGetLastError();   // an invalidated capture leaves a non-sticky error behind
    if (!run.ok()) return run;
    return absl::Status(cuda::cuda_status(ended, "capture: cudaStreamEndCapture").code(),
                        absl::StrCat(cuda::cuda_status(ended, "capture: cudaStreamEndCapture").message(),
                                     " (something in the step broke stream capture: a synchronize, a "
                                     "cudaMalloc or a call on the legacy default stream)"));
  }
  std::unique_ptr<CudaGraph> g(new CudaGraph());
  g->device_ = device;
  g->graph_ = graph;
  size_t nodes = 0;
  ENCORE_RETURN_IF_CUDA_ERROR(cudaGraphGetNodes(graph, nullptr, &nodes), "capture: cudaGraphGetNodes");
  g->nodes_ = static_cast<int64_t>(nodes);
  cudaGraphExec_t exec = nullptr;
  ENCORE_RETURN_IF_CUDA_ERROR(cudaGraphInstantiateWithFlags(&exec, graph, 0), "capture: cudaGraphInstantiate");
  g->exec_ = exec;
  ENCORE_RETURN_IF_CUDA_ERROR(cudaGraphUpload(exec, s), "capture: cudaGraphUpload");
  ENCORE_RETURN_IF_CUDA_ERROR(cudaStreamSynchronize(s), "capture: waiting for the upload");
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

absl::Status CudaGraph::dump_dot(const std::string& path) const {
  ENCORE_RETURN_IF_CUDA_ERROR(
      cudaGraphDebugDotPrint(as_graph(graph_), path.c_str(), cudaGraphDebugDotFlagsVerbose), "dump_dot");
  return absl::OkStatus();
}

#else  // !ENCORE_HAVE_CUDA

absl::Status CudaGraph::begin(Device device) {
  return absl::UnimplementedError(
      absl::StrCat("capture: the step runs on ", device.str(), ", but encore was built without CUDA"));
}
absl::StatusOr<std::unique_ptr<CudaGraph>> CudaGraph::end(Device, absl::Status run) {
  return run.ok() ? absl::UnimplementedError("capture: encore was built without CUDA") : run;
}
CudaGraph::~CudaGraph() = default;
absl::Status CudaGraph::replay() const { return absl::UnimplementedError("replay: built without CUDA"); }
absl::Status CudaGraph::dump_dot(const std::string&) const {
  return absl::UnimplementedError("dump_dot: built without CUDA");
}

#endif

}  // namespace encore::capture_internal
