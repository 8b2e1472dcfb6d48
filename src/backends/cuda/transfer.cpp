// The CUDA backend's host <-> device copies (KernelTable::copy_host_device):
// through encore's stream (so recorders see them) and pinned staging memory.
// Both tensors dense, same dtype and element count; exactly one on CUDA. Host
// to device returns once the data is staged: the host source may be reused at
// once, and the device tensor is written in stream order, after the work
// queued before it (NOTE [ Staged host-to-device copies ] in allocator.h).
// Device to host returns when the data is in host memory.
#include <cstring>

#include "encore/tensor.h"

#include "src/backends/cuda/allocator.h"
#include "src/backends/cuda/runtime.h"
#include "src/core/stream.h"

namespace encore::cuda {
namespace {

constexpr int64_t kChunk = kStagingChunk;   // bytes staged at a time

struct TransferArgs {
  char* dst;
  const char* src;
  int64_t nbytes;
  int device;   // the CUDA side's index
  template <typename V>
  void fields(V& v) const { v("dst", dst); v("src", src); v("nbytes", nbytes); v("device", device); }
};

// Pageable host memory is staged through pinned blocks (NOTE [ Staged
// host-to-device copies ] in allocator.h): no wait for the GPU unless every
// block is still in flight.
void host_to_device(const TransferArgs& a) {
  const cudaStream_t s = active_stream();
  for (int64_t done = 0; done < a.nbytes; done += kChunk) {
    const int64_t n = std::min(kChunk, a.nbytes - done);
    StagingBlock* block = take_staging_block(a.device, n);
    std::memcpy(block->data, a.src + done, n);
    const cudaError_t err = cudaMemcpyAsync(a.dst + done, block->data, n, cudaMemcpyHostToDevice, s);
    give_back_staging_block(a.device, block, /*queued=*/err == cudaSuccess);
    check(err, "copy to cuda");
  }
}

// The copy must have landed before the host reads it: one chunk at a time
// through the shared pinned buffer, waiting for each.
void device_to_host(const TransferArgs& a) {
  std::lock_guard<std::mutex> lock(pinned_staging_mutex());
  const PinnedBuffer buf = pinned_staging(std::min(a.nbytes, kChunk));
  const cudaStream_t s = active_stream();
  for (int64_t done = 0; done < a.nbytes; done += kChunk) {
    const int64_t n = std::min(kChunk, a.nbytes - done);
    check(cudaMemcpyAsync(buf.data, a.src + done, n, cudaMemcpyDeviceToHost, s), "copy to cpu");
    check(cudaStreamSynchronize(s), "copy to cpu");
    std::memcpy(a.dst + done, buf.data, n);
  }
}

}  // namespace

void copy_host_device(const Tensor& dst, const Tensor& src) {
  ENCORE_CHECK(dst.dtype() == src.dtype() && dst.numel() == src.numel() && dst.is_contiguous() &&
                   src.is_contiguous() && dst.device().is_cuda() != src.device().is_cuda(),
               "copy_host_device: needs dense tensors of one dtype and size on a host and a CUDA device; got %s "
               "%s on %s and %s %s on %s",
               shape_str(dst.shape()), dtype_name(dst.dtype()), dst.device().str(), shape_str(src.shape()),
               dtype_name(src.dtype()), src.device().str());
  const int64_t nbytes = src.numel() * dtype_size(src.dtype());
  if (nbytes == 0) return;
  const bool to_device = dst.device().is_cuda();
  Stream& s = current_stream(to_device ? dst.device() : src.device());
  // Refused inside a captured step either way; only the read back waits for the GPU.
  if (to_device) {
    s.host_write("copy to cuda");
  } else {
    s.host_access("copy to cpu");
  }
  const TransferArgs args{static_cast<char*>(dst.data_ptr()), static_cast<const char*>(src.data_ptr()), nbytes,
                          to_device ? dst.device().index : src.device().index};
  if (to_device) {
    s.launch<&host_to_device>("copy_to_cuda", args, {src.storage()}, {dst.storage()});
  } else {
    s.launch<&device_to_host>("copy_to_cpu", args, {src.storage()}, {dst.storage()});
  }
}

}  // namespace encore::cuda
