// backend::softmax, cross_entropy, layer_norm, embedding, dropout and their
// backwards: the dtype checks, the scratch tensors (from empty(), so capture
// plans them), the argument structs and one launch of the backend kernel of
// the tensors' device (cpu/nn.cpp, cuda/nn.cu) with the one read/write list.
#include <algorithm>

#include "encore/error.h"
#include "src/backends/dtype_checks.h"
#include "src/backends/kernels.h"
#include "src/backends/storage_list.h"
#include "src/core/stream.h"

namespace encore::backend {
namespace {

// i32 or i64 class ids and indices.
void check_index(DType t, const char* op) {
  if (t == DType::kInt32 || t == DType::kInt64) return;
  throw_error(absl::StatusCode::kInvalidArgument,
              absl::StrFormat("%s: index dtype %s is not supported (needs i32 or i64)", op, dtype_name(t)));
}

// The kernels index flat contiguous memory on one device (the op layer's
// contract). Returns `device`.
Device check_tensors(const char* op, Device device, std::initializer_list<const Tensor*> ts) {
  for (const Tensor* t : ts) {
    if (!t->defined()) continue;
    ENCORE_CHECK(t->device() == device && t->is_contiguous(),
                 "%s: internal: every tensor must be contiguous on %s, got %s %s on %s%s", op, device.str(),
                 shape_str(t->shape()), dtype_name(t->dtype()), t->device().str(),
                 t->is_contiguous() ? "" : " (not contiguous)");
  }
  return device;
}

const void* cptr_or_null(const Tensor& t) { return t.defined() ? t.data_ptr() : nullptr; }
void* ptr_or_null(const Tensor& t) { return t.defined() ? t.data_ptr() : nullptr; }

// The device's kernel error word, where its backend has one (NOTE [ Index checks ]).
uint32_t* error_word(const NnKernels& k, Device device) {
  return k.error_word != nullptr ? k.error_word(device.index) : nullptr;
}

}  // namespace

// NOTE [ Empty tensors do no work ]: an empty tensor's other dims may be
// huge ([2^63 - 1, 0], a view by expand), and a kernel that walks rows,
// lanes or blocks of them ran 2^63 - 1 empty steps (softmax on such a
// tensor never returned; on CUDA the grid would not launch). A kernel whose
// every output is empty is not launched: it has nothing to write.
void softmax(const Tensor& out, const Tensor& x, int64_t outer, int64_t n, int64_t inner, bool log) {
  const char* op = log ? "log_softmax" : "softmax";
  check_float(x.dtype(), op);
  const Device device = check_tensors(op, x.device(), {&out, &x});
  if (out.numel() == 0) return;   // NOTE [ Empty tensors do no work ]
  const SoftmaxArgs args{x.data_ptr(), out.data_ptr(), outer, n, inner, x.dtype(), log};
  current_stream(device).launch(kernels_for(device).nn->softmax, op, args, {x.storage()}, {out.storage()});
}

void softmax_backward(const Tensor& grad_in, const Tensor& grad_out, const Tensor& out, int64_t outer,
                      int64_t n, int64_t inner, bool log) {
  const char* op = log ? "log_softmax_backward" : "softmax_backward";
  check_float(out.dtype(), op);
  const Device device = check_tensors(op, out.device(), {&grad_in, &grad_out, &out});
  if (grad_in.numel() == 0) return;   // NOTE [ Empty tensors do no work ]
  const SoftmaxBackwardArgs args{grad_out.data_ptr(), out.data_ptr(), grad_in.data_ptr(), outer, n, inner,
                                 out.dtype(), log};
  current_stream(device).launch(kernels_for(device).nn->softmax_backward, op, args,
                                {grad_out.storage(), out.storage()}, {grad_in.storage()});
}

void cross_entropy(const Tensor& loss, const Tensor& stats, const Tensor& logits, const Tensor& target,
                   int64_t ignore_index) {
  constexpr const char* kOp = "cross_entropy";
  check_float(logits.dtype(), kOp);
  check_index(target.dtype(), kOp);
  const Device device = check_tensors(kOp, logits.device(), {&loss, &stats, &logits, &target});
  const NnKernels& k = *kernels_for(device).nn;
  const CrossEntropyArgs args{logits.data_ptr(), target.data_ptr(), loss.data_ptr(), stats.data<float>(),
                              logits.size(0),    logits.size(1),    ignore_index,    logits.dtype(),
                              target.dtype(),    error_word(k, device)};
  current_stream(device).launch(k.cross_entropy, kOp, args, {logits.storage(), target.storage()},
                                {loss.storage(), stats.storage()});
}

void cross_entropy_backward(const Tensor& grad_logits, const Tensor& grad_loss, const Tensor& logits,
                            const Tensor& target, const Tensor& stats, int64_t ignore_index) {
  constexpr const char* kOp = "cross_entropy_backward";
  check_float(logits.dtype(), kOp);
  check_index(target.dtype(), kOp);
  const Device device = check_tensors(kOp, logits.device(),
                                      {&grad_logits, &grad_loss, &logits, &target, &stats});
  const CrossEntropyBackwardArgs args{logits.data_ptr(), target.data_ptr(), stats.data<float>(),
                                      grad_loss.data_ptr(), grad_logits.data_ptr(), logits.size(0),
                                      logits.size(1), ignore_index, logits.dtype(), target.dtype()};
  current_stream(device).launch(kernels_for(device).nn->cross_entropy_backward, kOp, args,
                                {logits.storage(), target.storage(), stats.storage(), grad_loss.storage()},
                                {grad_logits.storage()});
}

void layer_norm(const Tensor& out, const Tensor& stats, const Tensor& x, const Tensor& weight,
                const Tensor& bias, double eps) {
  constexpr const char* kOp = "layer_norm";
  check_float(x.dtype(), kOp);
  const Device device = check_tensors(kOp, x.device(), {&out, &stats, &x, &weight, &bias});
  const LayerNormArgs args{x.data_ptr(), cptr_or_null(weight), cptr_or_null(bias), out.data_ptr(),
                           stats.data<float>(), x.size(0), x.size(1), static_cast<float>(eps), x.dtype()};
  current_stream(device).launch_many(kernels_for(device).nn->layer_norm, kOp, args,
                                     StorageList{&x, &weight, &bias}.span(), StorageList{&out, &stats}.span());
}

// NOTE [ Deterministic layer_norm sums ] in kernel_table.h.
void layer_norm_backward(const Tensor& dx, const Tensor& dweight, const Tensor& dbias, const Tensor& grad_out,
                         const Tensor& x, const Tensor& weight, const Tensor& stats) {
  constexpr const char* kOp = "layer_norm_backward";
  check_float(x.dtype(), kOp);
  const Device device = check_tensors(kOp, x.device(), {&dx, &dweight, &dbias, &grad_out, &x, &weight, &stats});
  const NnKernels& k = *kernels_for(device).nn;
  const int64_t rows = x.size(0), cols = x.size(1);
  const int64_t rows_per_chunk = std::max<int64_t>(1, (rows + k.layer_norm_max_chunks - 1) / k.layer_norm_max_chunks);
  const int64_t chunks = (rows + rows_per_chunk - 1) / rows_per_chunk;
  const bool sums = dweight.defined() || dbias.defined();
  // At least one element, so that `partial` is a real pointer whenever sums are wanted.
  const Tensor partial = empty({sums ? std::max<int64_t>(1, chunks * 2 * cols) : 0}, kFloat32, device);
  const LayerNormBackwardArgs args{grad_out.data_ptr(),
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
                                   x.dtype()};
  current_stream(device).launch_many(k.layer_norm_backward, kOp, args,
                                     StorageList{&grad_out, &x, &weight, &stats}.span(),
                                     StorageList{&dx, &dweight, &dbias, &partial}.span());
}

void embedding(const Tensor& out, const Tensor& weight, const Tensor& indices) {
  constexpr const char* kOp = "embedding";
  check_numeric(weight.dtype(), kOp);
  check_index(indices.dtype(), kOp);
  const Device device = check_tensors(kOp, weight.device(), {&out, &weight, &indices});
  const NnKernels& k = *kernels_for(device).nn;
  const EmbeddingArgs args{weight.data_ptr(), indices.data_ptr(), out.data_ptr(),  indices.numel(),
                           weight.size(0),    weight.size(1),     weight.dtype(),  indices.dtype(),
                           error_word(k, device)};
  current_stream(device).launch(k.embedding, kOp, args, {weight.storage(), indices.storage()}, {out.storage()});
}

void embedding_backward(const Tensor& grad_weight, const Tensor& grad_out, const Tensor& indices) {
  constexpr const char* kOp = "embedding_backward";
  check_float(grad_weight.dtype(), kOp);
  check_index(indices.dtype(), kOp);
  const Device device = check_tensors(kOp, grad_weight.device(), {&grad_weight, &grad_out, &indices});
  const NnKernels& k = *kernels_for(device).nn;
  EmbeddingBackwardArgs args{grad_out.data_ptr(), indices.data_ptr(), grad_weight.data_ptr(), nullptr, 0,
                             indices.numel(),     grad_weight.size(0), grad_weight.size(1), grad_weight.dtype(),
                             indices.dtype()};
  Tensor workspace;
  if (k.embedding_backward_workspace != nullptr) {
    const char* why = "";
    args.workspace_bytes = k.embedding_backward_workspace(args, &why);
    ENCORE_CHECK(args.workspace_bytes >= 0, "%s: %d indices into %d rows %s (grad_weight %s)", kOp, args.n,
                 args.vocab, why, shape_str(grad_weight.shape()));
  }
  if (args.workspace_bytes > 0) {
    workspace = empty({(args.workspace_bytes + 7) / 8}, kInt64, device);
    args.workspace = workspace.data_ptr();
  }
  current_stream(device).launch_many(k.embedding_backward, kOp, args, StorageList{&grad_out, &indices}.span(),
                                     StorageList{&grad_weight, &workspace}.span());
}

void dropout(const Tensor& out, const Tensor& mask, const Tensor& a, const Tensor& state, double p) {
  constexpr const char* kOp = "dropout";
  check_float(a.dtype(), kOp);
  const Device device = check_tensors(kOp, a.device(), {&out, &mask, &a, &state});
  ENCORE_CHECK(state.dtype() == kInt64 && state.numel() == 2,
               "dropout: generator state must be i64 [2] {seed, offset}, got %s %s", shape_str(state.shape()),
               dtype_name(state.dtype()));
  const DropoutArgs args{a.data_ptr(),          out.data_ptr(), mask.defined() ? mask.data<bool>() : nullptr,
                         state.data<int64_t>(), a.numel(),      static_cast<float>(p),
                         static_cast<float>(1.0 / (1.0 - p)),   a.dtype()};
  current_stream(device).launch_many(kernels_for(device).nn->dropout, kOp, args,
                                     StorageList{&a, &state}.span(), StorageList{&out, &mask, &state}.span());
}

void dropout_backward(const Tensor& grad_in, const Tensor& grad_out, const Tensor& mask, double scale) {
  constexpr const char* kOp = "dropout_backward";
  check_float(grad_in.dtype(), kOp);
  const Device device = check_tensors(kOp, grad_in.device(), {&grad_in, &grad_out, &mask});
  const DropoutBackwardArgs args{grad_out.data_ptr(), mask.data<bool>(), grad_in.data_ptr(), grad_in.numel(),
                                 static_cast<float>(scale), grad_in.dtype()};
  current_stream(device).launch(kernels_for(device).nn->dropout_backward, kOp, args,
                                {grad_out.storage(), mask.storage()}, {grad_in.storage()});
}

}  // namespace encore::backend
