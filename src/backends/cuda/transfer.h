// Copies between host memory and one CUDA device, through encore's stream
// (so recorders see them) and a pinned staging buffer. Both tensors dense
// (contiguous), same dtype and element count; exactly one of them on CUDA.
// Returns when the copy has completed (the host side may be reused at once).
//
//   Tensor d = empty(h.shape(), h.dtype(), Device::cuda(0));
//   cuda::copy_host_device(d, h.contiguous());
#pragma once

#include "encore/tensor.h"

namespace encore::cuda {

void copy_host_device(const Tensor& dst, const Tensor& src);

}  // namespace encore::cuda
