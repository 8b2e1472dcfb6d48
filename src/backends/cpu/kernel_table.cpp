// The CPU backend's kernel table (src/backends/kernel_table.h): one line per
// kernel family, each family's entries defined beside its kernels.
#include "src/backends/kernel_table.h"

namespace encore {
namespace cpu {
extern const backend::BinaryKernels kBinary;   // binary.cpp
extern const backend::UnaryKernels kUnary;     // unary.cpp
extern const backend::SelectKernels kSelect;   // select.cpp
extern const backend::CopyKernels kCopy;       // copy.cpp
extern const backend::ReduceKernels kReduce;   // reduce.cpp
extern const backend::NnKernels kNn;           // nn.cpp
extern const backend::GemmKernels kGemm;       // gemm.cpp
extern const backend::OptimKernels kOptim;     // optim.cpp
extern const backend::CnnKernels kCnn;         // cnn.cpp
extern const backend::LossKernels kLoss;       // loss.cpp
extern const backend::IndexKernels kIndex;     // index.cpp
}  // namespace cpu

namespace backend {
extern const KernelTable kCpuKernels = {
    .name = "cpu",
    .binary = &cpu::kBinary,
    .unary = &cpu::kUnary,
    .select = &cpu::kSelect,
    .copy = &cpu::kCopy,
    .reduce = &cpu::kReduce,
    .nn = &cpu::kNn,
    .gemm = &cpu::kGemm,
    .optim = &cpu::kOptim,
    .cnn = &cpu::kCnn,
    .loss = &cpu::kLoss,
    .index = &cpu::kIndex,
    .copy_host_device = nullptr,
};
}  // namespace backend
}  // namespace encore
