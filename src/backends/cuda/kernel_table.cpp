// The CUDA backend's kernel table (src/backends/kernel_table.h): one line per
// kernel family, each family's entries defined beside its kernels.
#include "src/backends/kernel_table.h"

namespace encore {
namespace cuda {
extern const backend::BinaryKernels kBinary;   // binary.cu
extern const backend::UnaryKernels kUnary;     // unary.cu
extern const backend::SelectKernels kSelect;   // select.cu
extern const backend::CopyKernels kCopy;       // copy.cu
extern const backend::ReduceKernels kReduce;   // reduce.cu
extern const backend::NnKernels kNn;           // nn.cu
extern const backend::GemmKernels kGemm;       // gemm.cu
extern const backend::OptimKernels kOptim;     // optim.cu
extern const backend::CnnKernels kCnn;         // cnn.cu
extern const backend::LossKernels kLoss;       // loss.cu
extern const backend::IndexKernels kIndex;     // index.cu
void copy_host_device(const Tensor& dst, const Tensor& src);   // transfer.cpp
}  // namespace cuda

namespace backend {
extern const KernelTable kCudaKernels = {
    .name = "cuda",
    .binary = &cuda::kBinary,
    .unary = &cuda::kUnary,
    .select = &cuda::kSelect,
    .copy = &cuda::kCopy,
    .reduce = &cuda::kReduce,
    .nn = &cuda::kNn,
    .gemm = &cuda::kGemm,
    .optim = &cuda::kOptim,
    .cnn = &cuda::kCnn,
    .loss = &cuda::kLoss,
    .index = &cuda::kIndex,
    .copy_host_device = &cuda::copy_host_device,
};
}  // namespace backend
}  // namespace encore
