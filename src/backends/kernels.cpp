// cuda_kernels(), copy_to_device() and the dtype checks shared by every kernel family's host side.
#include "src/backends/kernels.h"

#include "encore/error.h"
#include "src/backends/dtype_checks.h"

namespace encore::backend {

#if ENCORE_HAVE_CUDA
extern const KernelTable kCudaKernels;   // cuda/kernel_table.cpp
#endif

const KernelTable& cuda_kernels(Device device) {
#if ENCORE_HAVE_CUDA
  return kCudaKernels;
#else
  throw_error(absl::StatusCode::kUnimplemented,
              absl::StrFormat("no kernels for device %s: encore was built without CUDA", device.str()));
#endif
}

Tensor copy_to_device(const Tensor& src, Device target, const char* op) {
  ENCORE_CHECK(src.device().is_cpu() != target.is_cpu() && src.is_contiguous(),
               "%s: internal: copy_to_device from %s to %s needs exactly one CPU side and a dense source", op,
               src.device().str(), target.str());
#if !ENCORE_HAVE_CUDA
  throw_error(absl::StatusCode::kUnimplemented,
              absl::StrFormat("%s: no copy from %s to %s: encore was built without CUDA (tensor %s)", op,
                              src.device().str(), target.str(), shape_str(src.shape())));
#endif
  const KernelTable& k = kernels_for(target.is_cpu() ? src.device() : target);
  ENCORE_CHECK_CODE(k.copy_host_device != nullptr, kUnimplemented, "%s: the %s backend cannot copy to the host",
                    op, k.name);
  Tensor out = empty(src.shape(), src.dtype(), target);
  k.copy_host_device(out, src);
  return out;
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
