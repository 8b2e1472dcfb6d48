// kernels_for() and the dtype checks shared by every kernel family's host side.
#include "src/backends/kernels.h"

#include "encore/error.h"
#include "src/backends/dtype_checks.h"

namespace encore::backend {

extern const KernelTable kCpuKernels;    // cpu/kernel_table.cpp
#if ENCORE_HAVE_CUDA
extern const KernelTable kCudaKernels;   // cuda/kernel_table.cpp
#endif

const KernelTable& kernels_for(Device device) {
  if (device.is_cpu()) [[likely]] return kCpuKernels;
#if ENCORE_HAVE_CUDA
  return kCudaKernels;
#else
  throw_error(absl::StatusCode::kUnimplemented,
              absl::StrFormat("no kernels for device %s: encore was built without CUDA", device.str()));
#endif
}

void check_float(DType t, const char* op) {
  if (t == DType::kFloat32 || t == DType::kFloat16 || t == DType::kBFloat16) return;
  throw_error(absl::StatusCode::kInvalidArgument,
              absl::StrFormat("%s: dtype %s is not supported (needs f32, f16 or bf16)", op, dtype_name(t)));
}

void check_numeric(DType t, const char* op) {
  if (t != DType::kInt32 && t != DType::kInt64) check_float(t, op);
}

}  // namespace encore::backend
