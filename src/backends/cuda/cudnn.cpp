// cuDNN: the status mapping (cudnn.h), one handle per device, and the
// convolutions of the cnn family's CUDA entries (CnnKernels::conv and ::plan,
// named in cuda/cnn.cu).
//
// NOTE [ cuDNN convolution plans ]
// - Descriptors and algorithms are chosen by cudnn_conv_plan at the first
//   eager call of a (device, geometry, pass, dtype, bias) and cached for the
//   life of the process; ConvArgs::plan holds the cache index, so the capture
//   run of a step (which calls the plan again) only looks it up and a graph
//   replays exactly the eager algorithm. The choice uses cuDNN's heuristics
//   (cudnnGet*Algorithm_v7), which run nothing on the GPU and allocate no
//   device memory, never cudnnFind* (which would time candidates with
//   workspaces of its own).
// - Deterministic: the first algorithm in the heuristics' order that cuDNN
//   marks CUDNN_DETERMINISTIC and that runs (status success); cuDNN's
//   non-deterministic backward algorithms (atomics) are never picked.
// - Math: f32 tensors with CUDNN_FMA_MATH (no TF32, as cuBLAS's f32 GEMMs);
//   f16/bf16 tensors with tensor cores, f32 accumulation (CUDNN_DATA_FLOAT
//   compute type).
// - Workspace: the algorithm's size from cudnnGet*WorkspaceSize, returned by
//   the plan; the host allocates it as a temporary tensor (from the arena
//   under capture) and the kernel passes it to cuDNN, which allocates nothing.
// - Bias: cudnnAddTensor after the forward, cudnnConvolutionBackwardBias in
//   the weights pass; both reduce in a fixed order.
#include "src/backends/cuda/cudnn.h"

#include <array>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>

#include "absl/strings/str_format.h"
#include "encore/error.h"
#include "src/backends/cuda/launch.h"
#include "src/backends/cuda/runtime.h"
#include "src/backends/kernel_table.h"

// cuDNN 9 marks its legacy convolution API deprecated; it is the API that
// takes plain NCHW descriptors with a workspace pointer and stays supported
// through cuDNN 9.
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

namespace encore::cuda {

absl::Status cudnn_status(cudnnStatus_t status, const char* what) {
  const std::string msg =
      absl::StrFormat("%s: cuDNN error %d: %s", what, static_cast<int>(status), cudnnGetErrorString(status));
  const int code = static_cast<int>(status);
  if (status == CUDNN_STATUS_NOT_INITIALIZED) return absl::UnavailableError(msg);
  if (status == CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED) return absl::ResourceExhaustedError(msg);
  if (code >= 2000 && code < 4000) return absl::InvalidArgumentError(msg);   // BAD_PARAM*, NOT_SUPPORTED*
  return absl::InternalError(msg);
}

namespace {

using backend::ConvArgs;
using backend::ConvGeom;
using backend::ConvPass;

constexpr int kMaxDevices = 64;

struct DeviceDnn {
  std::mutex mu;                       // guards the handle's stream setting and its calls
  cudnnHandle_t handle = nullptr;      // created on first use, never destroyed (as cuBLAS's)
};

std::array<DeviceDnn, kMaxDevices>& devices() {
  static auto* d = new std::array<DeviceDnn, kMaxDevices>();
  return *d;
}

struct DnnLease {
  cudnnHandle_t handle;
  std::unique_lock<std::mutex> lock;
};

DnnLease lease_dnn(int device) {
  ENCORE_CHECK(device >= 0 && device < kMaxDevices, "cuda:%d: device index out of range for cuDNN", device);
  DeviceDnn& d = devices()[device];
  std::unique_lock<std::mutex> lock(d.mu);
  if (d.handle == nullptr) [[unlikely]] {
    set_device(device);
    ENCORE_CUDNN_CHECK(cudnnCreate(&d.handle), "cudnnCreate");
  }
  return DnnLease{d.handle, std::move(lock)};
}

cudnnDataType_t dnn_type(DType t) {
  switch (t) {
    case DType::kFloat16: return CUDNN_DATA_HALF;
    case DType::kBFloat16: return CUDNN_DATA_BFLOAT16;
    default: return CUDNN_DATA_FLOAT;
  }
}

struct Plan {
  cudnnTensorDescriptor_t x = nullptr, y = nullptr, b = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;
  int algo = 0;                  // the pass's cudnnConvolution*Algo_t
  int64_t workspace_bytes = 0;
};

struct PlanKey {
  int device;
  int64_t v[16];
  ConvPass pass;
  DType dtype;
  bool bias;
  bool operator<(const PlanKey& o) const {
    if (device != o.device) return device < o.device;
    for (int i = 0; i < 16; ++i) {
      if (v[i] != o.v[i]) return v[i] < o.v[i];
    }
    return std::tie(pass, dtype, bias) < std::tie(o.pass, o.dtype, o.bias);
  }
};

struct Plans {
  std::mutex mu;
  std::map<PlanKey, int64_t> ids;
  std::deque<Plan> plans;
};

Plans& plans() {
  static auto* p = new Plans();
  return *p;
}

std::string geom_str(const ConvGeom& g) {
  return absl::StrFormat("input [%d, %d, %d, %d], weight [%d, %d, %d, %d], stride (%d, %d), padding (%d, %d), "
                         "dilation (%d, %d), groups %d",
                         g.n, g.c, g.h, g.w, g.k, g.c / g.groups, g.kh, g.kw, g.stride_h, g.stride_w, g.pad_h,
                         g.pad_w, g.dil_h, g.dil_w, g.groups);
}

int to_int(int64_t v, const ConvGeom& g) {
  ENCORE_CHECK(v >= 0 && v <= INT32_MAX, "conv2d: a size of %s passes cuDNN's 32-bit ints", geom_str(g));
  return static_cast<int>(v);
}

Plan make_plan(cudnnHandle_t h, const ConvArgs& a) {
  const ConvGeom& g = a.g;
  const cudnnDataType_t t = dnn_type(a.dtype);
  Plan p;
  const char* what = "conv2d: cudnn descriptors";
  ENCORE_CUDNN_CHECK(cudnnCreateTensorDescriptor(&p.x), what);
  ENCORE_CUDNN_CHECK(cudnnCreateTensorDescriptor(&p.y), what);
  ENCORE_CUDNN_CHECK(cudnnCreateFilterDescriptor(&p.w), what);
  ENCORE_CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&p.conv), what);
  ENCORE_CUDNN_CHECK(cudnnSetTensor4dDescriptor(p.x, CUDNN_TENSOR_NCHW, t, to_int(g.n, g), to_int(g.c, g),
                                                to_int(g.h, g), to_int(g.w, g)),
                     "conv2d: input descriptor");
  ENCORE_CUDNN_CHECK(cudnnSetTensor4dDescriptor(p.y, CUDNN_TENSOR_NCHW, t, to_int(g.n, g), to_int(g.k, g),
                                                to_int(g.oh, g), to_int(g.ow, g)),
                     "conv2d: output descriptor");
  ENCORE_CUDNN_CHECK(cudnnSetFilter4dDescriptor(p.w, t, CUDNN_TENSOR_NCHW, to_int(g.k, g),
                                                to_int(g.c / g.groups, g), to_int(g.kh, g), to_int(g.kw, g)),
                     "conv2d: weight descriptor");
  ENCORE_CUDNN_CHECK(cudnnSetConvolution2dDescriptor(p.conv, to_int(g.pad_h, g), to_int(g.pad_w, g),
                                                     to_int(g.stride_h, g), to_int(g.stride_w, g),
                                                     to_int(g.dil_h, g), to_int(g.dil_w, g),
                                                     CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT),
                     "conv2d: convolution descriptor");
  ENCORE_CUDNN_CHECK(cudnnSetConvolutionGroupCount(p.conv, to_int(g.groups, g)), "conv2d: group count");
  ENCORE_CUDNN_CHECK(
      cudnnSetConvolutionMathType(p.conv, a.dtype == DType::kFloat32 ? CUDNN_FMA_MATH : CUDNN_TENSOR_OP_MATH),
      "conv2d: math type");
  if (a.b != nullptr) {
    ENCORE_CUDNN_CHECK(cudnnCreateTensorDescriptor(&p.b), what);
    ENCORE_CUDNN_CHECK(cudnnSetTensor4dDescriptor(p.b, CUDNN_TENSOR_NCHW, t, 1, to_int(g.k, g), 1, 1),
                       "conv2d: bias descriptor");
  }
  constexpr int kMaxAlgos = 16;
  int found = 0;
  bool chosen = false;
  size_t bytes = 0;
  switch (a.pass) {
    case ConvPass::kForward: {
      cudnnConvolutionFwdAlgoPerf_t perf[kMaxAlgos];
      ENCORE_CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithm_v7(h, p.x, p.w, p.conv, p.y, kMaxAlgos, &found, perf),
                         "conv2d: cudnnGetConvolutionForwardAlgorithm_v7");
      for (int i = 0; i < found && !chosen; ++i) {
        if (perf[i].status != CUDNN_STATUS_SUCCESS || perf[i].determinism != CUDNN_DETERMINISTIC) continue;
        if (cudnnGetConvolutionForwardWorkspaceSize(h, p.x, p.w, p.conv, p.y, perf[i].algo, &bytes) !=
            CUDNN_STATUS_SUCCESS) continue;
        p.algo = perf[i].algo;
        chosen = true;
      }
      break;
    }
    case ConvPass::kBackwardData: {
      cudnnConvolutionBwdDataAlgoPerf_t perf[kMaxAlgos];
      ENCORE_CUDNN_CHECK(
          cudnnGetConvolutionBackwardDataAlgorithm_v7(h, p.w, p.y, p.conv, p.x, kMaxAlgos, &found, perf),
          "conv2d: cudnnGetConvolutionBackwardDataAlgorithm_v7");
      for (int i = 0; i < found && !chosen; ++i) {
        if (perf[i].status != CUDNN_STATUS_SUCCESS || perf[i].determinism != CUDNN_DETERMINISTIC) continue;
        if (cudnnGetConvolutionBackwardDataWorkspaceSize(h, p.w, p.y, p.conv, p.x, perf[i].algo, &bytes) !=
            CUDNN_STATUS_SUCCESS) continue;
        p.algo = perf[i].algo;
        chosen = true;
      }
      break;
    }
    case ConvPass::kBackwardWeights: {
      cudnnConvolutionBwdFilterAlgoPerf_t perf[kMaxAlgos];
      ENCORE_CUDNN_CHECK(
          cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, p.x, p.y, p.conv, p.w, kMaxAlgos, &found, perf),
          "conv2d: cudnnGetConvolutionBackwardFilterAlgorithm_v7");
      for (int i = 0; i < found && !chosen; ++i) {
        if (perf[i].status != CUDNN_STATUS_SUCCESS || perf[i].determinism != CUDNN_DETERMINISTIC) continue;
        if (cudnnGetConvolutionBackwardFilterWorkspaceSize(h, p.x, p.y, p.conv, p.w, perf[i].algo, &bytes) !=
            CUDNN_STATUS_SUCCESS) continue;
        p.algo = perf[i].algo;
        chosen = true;
      }
      break;
    }
  }
  ENCORE_CHECK(chosen, "conv2d: cuDNN has no deterministic algorithm for %s (%s, pass %d)", geom_str(g),
               dtype_name(a.dtype), static_cast<int>(a.pass));
  p.workspace_bytes = static_cast<int64_t>(bytes);
  return p;
}

}  // namespace

int64_t cudnn_conv_plan(ConvArgs& a) {
  const ConvGeom& g = a.g;
  const PlanKey key{a.device,
                    {g.n, g.c, g.h, g.w, g.k, g.kh, g.kw, g.oh, g.ow, g.stride_h, g.stride_w, g.pad_h, g.pad_w,
                     g.dil_h, g.dil_w, g.groups},
                    a.pass,
                    a.dtype,
                    a.b != nullptr};
  Plans& ps = plans();
  {
    std::lock_guard<std::mutex> lock(ps.mu);
    auto it = ps.ids.find(key);
    if (it != ps.ids.end()) {
      a.plan = it->second;
      return ps.plans[static_cast<size_t>(a.plan)].workspace_bytes;
    }
  }
  DnnLease dnn = lease_dnn(a.device);
  Plan plan = make_plan(dnn.handle, a);
  std::lock_guard<std::mutex> lock(ps.mu);
  auto it = ps.ids.find(key);
  if (it == ps.ids.end()) {
    it = ps.ids.emplace(key, static_cast<int64_t>(ps.plans.size())).first;
    ps.plans.push_back(plan);
  }
  a.plan = it->second;
  return ps.plans[static_cast<size_t>(a.plan)].workspace_bytes;
}

void cudnn_conv(const ConvArgs& a) {
  if (a.g.n == 0 || a.g.k == 0) return;
  Plan p;
  {
    Plans& ps = plans();
    std::lock_guard<std::mutex> lock(ps.mu);
    ENCORE_CHECK(a.plan >= 0 && a.plan < static_cast<int64_t>(ps.plans.size()),
                 "conv2d: internal: launch without a plan (%d)", a.plan);
    p = ps.plans[static_cast<size_t>(a.plan)];   // descriptors are never destroyed: a copy of the handles
  }
  DnnLease dnn = lease_dnn(a.device);
  ENCORE_CUDNN_CHECK(cudnnSetStream(dnn.handle, active_stream()), "conv2d: cudnnSetStream");
  const float one = 1.f, zero = 0.f;
  const size_t ws = static_cast<size_t>(a.workspace_bytes);
  switch (a.pass) {
    case ConvPass::kForward:
      ENCORE_CUDNN_CHECK(cudnnConvolutionForward(dnn.handle, &one, p.x, a.x, p.w, a.w, p.conv,
                                                 static_cast<cudnnConvolutionFwdAlgo_t>(p.algo), a.workspace, ws,
                                                 &zero, p.y, a.y),
                         "conv2d: cudnnConvolutionForward");
      if (a.b != nullptr) {
        ENCORE_CUDNN_CHECK(cudnnAddTensor(dnn.handle, &one, p.b, a.b, &one, p.y, a.y), "conv2d: cudnnAddTensor");
      }
      break;
    case ConvPass::kBackwardData:
      ENCORE_CUDNN_CHECK(cudnnConvolutionBackwardData(dnn.handle, &one, p.w, a.w, p.y, a.y, p.conv,
                                                      static_cast<cudnnConvolutionBwdDataAlgo_t>(p.algo),
                                                      a.workspace, ws, &zero, p.x, a.x),
                         "conv2d_backward_data: cudnnConvolutionBackwardData");
      break;
    case ConvPass::kBackwardWeights:
      ENCORE_CUDNN_CHECK(cudnnConvolutionBackwardFilter(dnn.handle, &one, p.x, a.x, p.y, a.y, p.conv,
                                                        static_cast<cudnnConvolutionBwdFilterAlgo_t>(p.algo),
                                                        a.workspace, ws, &zero, p.w, a.w),
                         "conv2d_backward_weights: cudnnConvolutionBackwardFilter");
      if (a.b != nullptr) {
        ENCORE_CUDNN_CHECK(cudnnConvolutionBackwardBias(dnn.handle, &one, p.y, a.y, &zero, p.b, a.b),
                           "conv2d_backward_weights: cudnnConvolutionBackwardBias");
      }
      break;
  }
}

}  // namespace encore::cuda
