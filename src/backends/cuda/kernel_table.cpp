// The CUDA backend's kernel table (src/backends/kernel_table.h): one line per
// kernel family, each family's entries defined beside its kernels.
#include "src/backends/kernel_table.h"

namespace encore {
namespace cuda {
extern const backend::BinaryKernels kBinary;   // binary.cu
extern const backend::UnaryKernels kUnary;     // unary.cu
extern const backend::SelectKernels kSelect;   // select.cu
extern const backend::CopyKernels kCopy;       // copy.cu
}  // namespace cuda

namespace backend {
extern const KernelTable kCudaKernels = {
    .name = "cuda",
    .binary = &cuda::kBinary,
    .unary = &cuda::kUnary,
    .select = &cuda::kSelect,
    .copy = &cuda::kCopy,
};
}  // namespace backend
}  // namespace encore
