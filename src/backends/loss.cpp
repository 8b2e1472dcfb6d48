// backend::bce_logits, nll and nll_backward: the dtype checks, the argument
// structs and one launch of the backend kernel of the tensors' device
// (cpu/loss.cpp, cuda/loss.cu) with the one read/write list.
#include "encore/error.h"
#include "src/backends/dtype_checks.h"
#include "src/backends/kernels.h"
#include "src/backends/storage_list.h"
#include "src/backends/tensor_layout.h"
#include "src/core/stream.h"

namespace encore::backend {
namespace {

void check_index_dtype(DType t, const char* op) {
  ENCORE_CHECK(t == DType::kInt32 || t == DType::kInt64, "%s: target dtype %s is not supported (needs i32 or i64)",
               op, dtype_name(t));
}

void check_dense(const char* op, Device device, std::initializer_list<const Tensor*> ts) {
  for (const Tensor* t : ts) {
    if (!t->defined()) continue;
    ENCORE_CHECK(t->device() == device && t->is_contiguous(),
                 "%s: internal: every tensor must be contiguous on %s, got %s %s on %s", op, device.str(),
                 shape_str(t->shape()), dtype_name(t->dtype()), t->device().str());
  }
}

uint32_t* error_word(Device device) {
  const NnKernels& k = *kernels_for(device).nn;
  return k.error_word != nullptr ? k.error_word(device.index) : nullptr;
}

constexpr const char* kBceNames[] = {"binary_cross_entropy_with_logits", "binary_cross_entropy_with_logits_backward",
                                     "binary_cross_entropy_with_logits_target_backward"};

}  // namespace

void bce_logits(BceMode mode, const Tensor& out, const Tensor& x, const Tensor& t, const Tensor& pos_weight) {
  const char* name = kBceNames[static_cast<int>(mode)];
  // The op computes f16 and bf16 inputs on their exact f32 upcasts (one
  // rounding of the result), so the kernels exist for f32 only.
  ENCORE_CHECK(x.dtype() == DType::kFloat32, "%s: the kernel runs on f32 (got %s; the op upcasts half types)", name,
               dtype_name(x.dtype()));
  const bool has_pw = pos_weight.defined();
  const Tensor& pw = has_pw ? pos_weight : x;
  const BceLogitsArgs args{make_layout<4>(out, {&x, &t, &pw}), x.dtype(), mode, has_pw};
  current_stream(out.device())
      .launch(kernels_for(out.device()).loss->bce_logits, name, args, {x.storage(), t.storage(), pw.storage()},
              {out.storage()});
}

void nll(const Tensor& out, const Tensor& out_weight, const Tensor& x, const Tensor& target, const Tensor& weight,
         int64_t ignore_index) {
  constexpr const char* kOp = "nll_loss";
  check_float(x.dtype(), kOp);
  check_index_dtype(target.dtype(), kOp);
  check_dense(kOp, x.device(), {&out, &out_weight, &x, &target, &weight});
  ENCORE_CHECK(x.dim() == 3, "%s: internal: x must be [outer, classes, inner], got %s", kOp, shape_str(x.shape()));
  const NllArgs args{x.data_ptr(),   target.data_ptr(),     weight.defined() ? weight.data_ptr() : nullptr,
                     out.data_ptr(), out_weight.data_ptr(), x.size(0), x.size(1), x.size(2), ignore_index,
                     x.dtype(),      target.dtype(),        error_word(x.device())};
  current_stream(x.device())
      .launch_many(kernels_for(x.device()).loss->nll, kOp, args, StorageList{&x, &target, &weight}.span(),
                   StorageList{&out, &out_weight}.span());
}

void nll_backward(const Tensor& grad_x, const Tensor& grad_out, const Tensor& target, const Tensor& weight,
                  int64_t ignore_index) {
  constexpr const char* kOp = "nll_loss_backward";
  check_float(grad_x.dtype(), kOp);
  check_index_dtype(target.dtype(), kOp);
  check_dense(kOp, grad_x.device(), {&grad_x, &grad_out, &target, &weight});
  ENCORE_CHECK(grad_x.dim() == 3, "%s: internal: grad_x must be [outer, classes, inner], got %s", kOp,
               shape_str(grad_x.shape()));
  const NllBackwardArgs args{grad_out.data_ptr(), target.data_ptr(), weight.defined() ? weight.data_ptr() : nullptr,
                             grad_x.data_ptr(),   grad_x.size(0),    grad_x.size(1),
                             grad_x.size(2),      ignore_index,      grad_x.dtype(),
                             target.dtype()};
  current_stream(grad_x.device())
      .launch_many(kernels_for(grad_x.device()).loss->nll_backward, kOp, args,
                   StorageList{&grad_out, &target, &weight}.span(), StorageList{&grad_x}.span());
}

}  // namespace encore::backend
