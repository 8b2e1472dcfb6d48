// Copies between host memory and one CUDA device, through encore's stream
// (so recorders see them) and pinned staging memory. Both tensors dense
// (contiguous), same dtype and element count; exactly one of them on CUDA.
// Host to device returns once the data is staged: the host source may be
// reused at once, and the device tensor is written in stream order, after the
// work queued before it (NOTE [ Staged host-to-device copies ] in
// allocator.h). Device to host returns when the data is in host memory.
//
//   Tensor d = empty(h.shape(), h.dtype(), Device::cuda(0));
//   cuda::copy_host_device(d, h.contiguous());
#pragma once

#include "encore/tensor.h"

namespace encore::cuda {

void copy_host_device(const Tensor& dst, const Tensor& src);

}  // namespace encore::cuda
