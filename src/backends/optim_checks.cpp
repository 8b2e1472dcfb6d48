#include "src/backends/optim_checks.h"

#include "encore/error.h"
#include "src/backends/optim_table.h"

namespace encore::backend {

void check_scalar(const char* op, const Tensor& t, DType dtype, const char* what, DeviceType type) {
  const char* where = type == DeviceType::kCUDA ? "a CUDA device" : "the cpu";
  ENCORE_CHECK(t.defined() && t.numel() == 1 && t.dtype() == dtype && t.device().type == type,
               "%s: %s must be a %s tensor with one element on %s, got %s %s on %s", op, what, dtype_name(dtype),
               where, t.defined() ? shape_str(t.shape()) : "undefined", t.defined() ? dtype_name(t.dtype()) : "-",
               t.defined() ? t.device().str() : "-");
}

void check_like(const char* op, const Tensor& param, const Tensor& t, DType dtype, const char* what) {
  ENCORE_CHECK(t.defined() && t.shape() == param.shape() && t.dtype() == dtype && t.device() == param.device(),
               "%s: %s must be %s %s like the parameter on %s, got %s %s on %s", op, what,
               shape_str(param.shape()), dtype_name(dtype), param.device().str(),
               t.defined() ? shape_str(t.shape()) : "undefined", t.defined() ? dtype_name(t.dtype()) : "-",
               t.defined() ? t.device().str() : "-");
}

void check_adamw_table(const Tensor& table, int64_t count, DeviceType type) {
  ENCORE_CHECK(table.device().type == type && table.is_contiguous() &&
                   table.numel() * dtype_size(table.dtype()) == count * static_cast<int64_t>(sizeof(AdamWEntry)),
               "adamw: table %s (%s on %s) does not hold %d entries on %s", shape_str(table.shape()),
               dtype_name(table.dtype()), table.device().str(), count,
               type == DeviceType::kCUDA ? "a CUDA device" : "the cpu");
}

}  // namespace encore::backend
