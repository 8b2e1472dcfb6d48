// The CUDA backend's kernel table (src/backends/kernel_table.h): one line per
// kernel family, each family's entries defined beside its kernels.
#include "src/backends/kernel_table.h"

namespace encore {
namespace cuda {
extern const backend::BinaryKernels kBinary;   // binary.cu
void copy_host_device(const Tensor& dst, const Tensor& src);   // transfer.cpp
}  // namespace cuda

namespace backend {
extern const KernelTable kCudaKernels = {
    .name = "cuda",
    .binary = &cuda::kBinary,
    .copy_host_device = &cuda::copy_host_device,
};
}  // namespace backend
}  // namespace encore
