// The CPU backend's kernel table (src/backends/kernel_table.h): one line per
// kernel family, each family's entries defined beside its kernels.
#include "src/backends/kernel_table.h"

namespace encore {
namespace cpu {
extern const backend::BinaryKernels kBinary;   // binary.cpp
extern const backend::UnaryKernels kUnary;     // unary.cpp
extern const backend::SelectKernels kSelect;   // select.cpp
extern const backend::CopyKernels kCopy;       // copy.cpp
}  // namespace cpu

namespace backend {
extern const KernelTable kCpuKernels = {
    .name = "cpu",
    .binary = &cpu::kBinary,
    .unary = &cpu::kUnary,
    .select = &cpu::kSelect,
    .copy = &cpu::kCopy,
};
}  // namespace backend
}  // namespace encore
