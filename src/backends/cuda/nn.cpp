// Host side of the CUDA nn kernels: checks, scratch tensors (from empty(), so
// capture plans them) and one stream launch per op; the kernels and their
// launchers are in nn.cu (nn_launch.h).
#include "src/backends/cuda/nn.h"

#include <algorithm>

#include "encore/error.h"
#include "src/backends/cuda/nn_launch.h"
#include "src/backends/cuda/runtime.h"
#include "src/core/kernel_errors.h"
#include "src/core/stream.h"

namespace encore::cuda {
namespace {

namespace nl = nn_launch;

nl::Float float_kind(DType t, const char* op) {
  switch (t) {
    case DType::kFloat32: return nl::Float::kF32;
    case DType::kFloat16: return nl::Float::kF16;
    case DType::kBFloat16: return nl::Float::kBF16;
    default:
      throw_error(absl::StatusCode::kInvalidArgument,
                  absl::StrFormat("cuda::%s: dtype %s is not supported (needs f32, f16 or bf16)", op, dtype_name(t)));
  }
}

nl::Index index_kind(DType t, const char* op) {
  switch (t) {
    case DType::kInt32: return nl::Index::kI32;
    case DType::kInt64: return nl::Index::kI64;
    default:
      throw_error(absl::StatusCode::kInvalidArgument,
                  absl::StrFormat("cuda::%s: index dtype %s is not supported (needs i32 or i64)", op, dtype_name(t)));
  }
}

// The kernels index flat contiguous memory on one device.
void check_tensors(const char* op, std::initializer_list<const Tensor*> ts) {
  for (const Tensor* t : ts) {
    if (!t->defined()) continue;
    ENCORE_CHECK(t->device().is_cuda() && t->is_contiguous(),
                 "cuda::%s: every tensor must be contiguous on a CUDA device, got %s %s on %s%s", op,
                 shape_str(t->shape()), dtype_name(t->dtype()), t->device().str(),
                 t->is_contiguous() ? "" : " (not contiguous)");
  }
}

const void* cptr_or_null(const Tensor& t) { return t.defined() ? t.data_ptr() : nullptr; }
void* ptr_or_null(const Tensor& t) { return t.defined() ? t.data_ptr() : nullptr; }

// A launch lists a fixed number of storages; an absent optional tensor takes
// the slot of one the launch touches anyway (a repeat is harmless).
Storage* storage_or(const Tensor& t, const Tensor& fallback) {
  return t.defined() ? t.storage() : fallback.storage();
}

}  // namespace

void softmax(const Tensor& out, const Tensor& x, int64_t outer, int64_t n, int64_t inner, bool log) {
  const char* op = log ? "log_softmax" : "softmax";
  check_tensors(op, {&out, &x});
  nl::SoftmaxArgs args{x.data_ptr(), out.data_ptr(), outer, n, inner, float_kind(x.dtype(), op), log};
  current_stream(out.device()).launch<&nl::softmax>(op, args, {x.storage()}, {out.storage()});
}

void softmax_backward(const Tensor& grad_in, const Tensor& grad_out, const Tensor& out, int64_t outer,
                      int64_t n, int64_t inner, bool log) {
  const char* op = log ? "log_softmax_backward" : "softmax_backward";
  check_tensors(op, {&grad_in, &grad_out, &out});
  nl::SoftmaxBackwardArgs args{grad_out.data_ptr(), out.data_ptr(), grad_in.data_ptr(), outer, n, inner,
                               float_kind(out.dtype(), op), log};
  current_stream(out.device()).launch<&nl::softmax_backward>(op, args, {grad_out.storage(), out.storage()},
                                                             {grad_in.storage()});
}

void cross_entropy(const Tensor& loss, const Tensor& stats, const Tensor& logits, const Tensor& target,
                   int64_t ignore_index) {
  constexpr const char* kOp = "cross_entropy";
  check_tensors(kOp, {&loss, &stats, &logits, &target});
  nl::CrossEntropyArgs args{logits.data_ptr(),  target.data_ptr(), loss.data_ptr(),
                            stats.data<float>(), logits.size(0),    logits.size(1),
                            ignore_index,        float_kind(logits.dtype(), kOp), index_kind(target.dtype(), kOp),
                            error_word(loss.device().index), static_cast<uint32_t>(KernelError::kClassIndex)};
  current_stream(loss.device()).launch<&nl::cross_entropy>(kOp, args, {logits.storage(), target.storage()},
                                                           {loss.storage(), stats.storage()});
}

void cross_entropy_backward(const Tensor& grad_logits, const Tensor& grad_loss, const Tensor& logits,
                            const Tensor& target, const Tensor& stats, int64_t ignore_index) {
  constexpr const char* kOp = "cross_entropy_backward";
  check_tensors(kOp, {&grad_logits, &grad_loss, &logits, &target, &stats});
  nl::CrossEntropyBackwardArgs args{logits.data_ptr(),
                                    target.data_ptr(),
                                    stats.data<float>(),
                                    grad_loss.data_ptr(),
                                    grad_logits.data_ptr(),
                                    logits.size(0),
                                    logits.size(1),
                                    ignore_index,
                                    float_kind(logits.dtype(), kOp),
                                    index_kind(target.dtype(), kOp)};
  current_stream(logits.device()).launch<&nl::cross_entropy_backward>(
      kOp, args, {logits.storage(), target.storage(), stats.storage(), grad_loss.storage()},
      {grad_logits.storage()});
}

void layer_norm(const Tensor& out, const Tensor& stats, const Tensor& x, const Tensor& weight,
                const Tensor& bias, double eps) {
  constexpr const char* kOp = "layer_norm";
  check_tensors(kOp, {&out, &stats, &x, &weight, &bias});
  nl::LayerNormArgs args{x.data_ptr(),         cptr_or_null(weight), cptr_or_null(bias),
                         out.data_ptr(),       stats.data<float>(),  x.size(0),
                         x.size(1),            static_cast<float>(eps), float_kind(x.dtype(), kOp)};
  current_stream(x.device()).launch<&nl::layer_norm>(
      kOp, args, {x.storage(), storage_or(weight, x), storage_or(bias, x)}, {out.storage(), stats.storage()});
}

// NOTE [ Deterministic layer_norm sums ] in nn_launch.h.
void layer_norm_backward(const Tensor& dx, const Tensor& dweight, const Tensor& dbias, const Tensor& grad_out,
                         const Tensor& x, const Tensor& weight, const Tensor& stats) {
  constexpr const char* kOp = "layer_norm_backward";
  check_tensors(kOp, {&dx, &dweight, &dbias, &grad_out, &x, &weight, &stats});
  const int64_t rows = x.size(0), cols = x.size(1);
  const int64_t rows_per_chunk = nl::layer_norm_rows_per_chunk(rows);
  const int64_t chunks = (rows + rows_per_chunk - 1) / rows_per_chunk;
  const bool sums = dweight.defined() || dbias.defined();
  // At least one element, so that `partial` is a real pointer whenever sums are wanted.
  Tensor partial = empty({sums ? std::max<int64_t>(1, chunks * 2 * cols) : 0}, kFloat32, x.device());
  nl::LayerNormBackwardArgs args{grad_out.data_ptr(),
                                 x.data_ptr(),
                                 cptr_or_null(weight),
                                 stats.data<float>(),
                                 ptr_or_null(dx),
                                 ptr_or_null(dweight),
                                 ptr_or_null(dbias),
                                 sums ? partial.data<float>() : nullptr,
                                 rows,
                                 cols,
                                 chunks,
                                 rows_per_chunk,
                                 float_kind(x.dtype(), kOp)};
  current_stream(x.device()).launch<&nl::layer_norm_backward>(
      kOp, args, {grad_out.storage(), x.storage(), storage_or(weight, x), stats.storage()},
      {storage_or(dx, partial), storage_or(dweight, partial), storage_or(dbias, partial), partial.storage()});
}

void embedding(const Tensor& out, const Tensor& weight, const Tensor& indices) {
  constexpr const char* kOp = "embedding";
  check_tensors(kOp, {&out, &weight, &indices});
  ENCORE_CHECK(weight.dtype() != kBool, "cuda::embedding: weight %s must be numeric, got bool",
               shape_str(weight.shape()));
  nl::EmbeddingArgs args{weight.data_ptr(), indices.data_ptr(), out.data_ptr(),
                         indices.numel(),   weight.size(0),     weight.size(1),
                         static_cast<int>(dtype_size(weight.dtype())), index_kind(indices.dtype(), kOp),
                         error_word(out.device().index), static_cast<uint32_t>(KernelError::kEmbeddingIndex)};
  current_stream(out.device()).launch<&nl::embedding>(kOp, args, {weight.storage(), indices.storage()},
                                                      {out.storage()});
}

// NOTE [ Deterministic embedding backward ] in nn_launch.h.
void embedding_backward(const Tensor& grad_weight, const Tensor& grad_out, const Tensor& indices) {
  constexpr const char* kOp = "embedding_backward";
  check_tensors(kOp, {&grad_weight, &grad_out, &indices});
  const int64_t n = indices.numel(), vocab = grad_weight.size(0), dim = grad_weight.size(1);
  ENCORE_CHECK(n < (int64_t{1} << 31) && vocab < (int64_t{1} << 31) - 1,
               "cuda::embedding_backward: %d indices into %d rows exceed the 32-bit sort (grad_weight %s)", n,
               vocab, shape_str(grad_weight.shape()));
  const Device dev = grad_weight.device();
  const int end_bit = nl::embedding_sort_bits(vocab);
  const size_t temp_bytes = n > 0 ? nl::embedding_sort_temp_bytes(n, end_bit) : 0;
  Tensor keys = empty({n}, kInt32, dev), keys_sorted = empty({n}, kInt32, dev);
  Tensor pos = empty({n}, kInt32, dev), pos_sorted = empty({n}, kInt32, dev);
  Tensor row_start = empty({vocab + 1}, kInt32, dev);
  Tensor sort_temp = empty({static_cast<int64_t>((temp_bytes + 7) / 8)}, kInt64, dev);
  nl::EmbeddingBackwardArgs args{grad_out.data_ptr(),
                                 indices.data_ptr(),
                                 grad_weight.data_ptr(),
                                 static_cast<uint32_t*>(keys.data_ptr()),
                                 static_cast<uint32_t*>(keys_sorted.data_ptr()),
                                 pos.data<int32_t>(),
                                 pos_sorted.data<int32_t>(),
                                 row_start.data<int32_t>(),
                                 sort_temp.data_ptr(),
                                 temp_bytes,
                                 n,
                                 vocab,
                                 dim,
                                 end_bit,
                                 float_kind(grad_weight.dtype(), kOp),
                                 index_kind(indices.dtype(), kOp)};
  current_stream(dev).launch<&nl::embedding_backward>(
      kOp, args, {grad_out.storage(), indices.storage()},
      {grad_weight.storage(), keys.storage(), keys_sorted.storage(), pos.storage(), pos_sorted.storage(),
       row_start.storage(), sort_temp.storage()});
}

void dropout(const Tensor& out, const Tensor& mask, const Tensor& a, const Tensor& state, double p) {
  constexpr const char* kOp = "dropout";
  check_tensors(kOp, {&out, &mask, &a, &state});
  ENCORE_CHECK(state.dtype() == kInt64 && state.numel() == 2,
               "cuda::dropout: generator state must be i64 [2] {seed, offset}, got %s %s",
               shape_str(state.shape()), dtype_name(state.dtype()));
  nl::DropoutArgs args{a.data_ptr(),
                       out.data_ptr(),
                       mask.defined() ? mask.data<bool>() : nullptr,
                       state.data<int64_t>(),
                       a.numel(),
                       static_cast<float>(p),
                       static_cast<float>(1.0 / (1.0 - p)),
                       float_kind(a.dtype(), kOp)};
  current_stream(out.device()).launch<&nl::dropout>(kOp, args, {a.storage(), state.storage()},
                                                    {out.storage(), storage_or(mask, out), state.storage()});
}

void dropout_backward(const Tensor& grad_in, const Tensor& grad_out, const Tensor& mask, double scale) {
  constexpr const char* kOp = "dropout_backward";
  check_tensors(kOp, {&grad_in, &grad_out, &mask});
  nl::DropoutBackwardArgs args{grad_out.data_ptr(), mask.data<bool>(), grad_in.data_ptr(), grad_in.numel(),
                               static_cast<float>(scale), float_kind(grad_in.dtype(), kOp)};
  current_stream(grad_in.device()).launch<&nl::dropout_backward>(kOp, args, {grad_out.storage(), mask.storage()},
                                                                 {grad_in.storage()});
}

}  // namespace encore::cuda
