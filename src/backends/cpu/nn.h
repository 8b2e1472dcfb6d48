// CPU kernels for the neural-network ops: softmax, log_softmax, cross
// entropy, layer norm, embedding and dropout. Each op has one fused forward
// kernel and one fused backward kernel (one launch each).
//
//   cpu::softmax(out, x, /*outer=*/4, /*n=*/10, /*inner=*/1, /*log=*/false);
//
// Layout: every launcher takes CONTIGUOUS tensors (the op makes them so) and
// plain sizes. A reduction over one dim of a contiguous tensor sees it as
// [outer, n, inner] (n: the reduced dim; inner = 1 is the fast last-dim path).
// Float tensors are f32, f16 or bf16 (computed in f32); saved statistics are
// always f32. Index tensors are i32 or i64.
//
// NOTE [ Index checks ]: out-of-range class ids and embedding indices are
// rejected by the ops on the host before launch in eager CPU steps. The
// kernels (CPU and CUDA) still never touch memory out of bounds: a bad class
// id counts as ignored and a bad embedding index reads (and scatters)
// nothing, so a captured graph replayed with bad data stays memory-safe; the
// forward kernels also report the bad index (src/core/kernel_errors.h), which
// capture(), Graph::replay() and, on CUDA, the next synchronization turn
// into an error naming the op.
#pragma once

#include <cstdint>

#include "encore/tensor.h"

namespace encore::cpu {

// out = softmax (or log_softmax) of x over n; x, out: [outer, n, inner].
void softmax(const Tensor& out, const Tensor& x, int64_t outer, int64_t n, int64_t inner, bool log);
// grad_in from grad_out (g) and the forward output y, same layout:
// softmax: y * (g - sum(g * y)); log_softmax: g - exp(y) * sum(g).
void softmax_backward(const Tensor& grad_in, const Tensor& grad_out, const Tensor& out, int64_t outer,
                      int64_t n, int64_t inner, bool log);

// logits [N, C], target [N] (i32/i64) -> loss (0-d, logits dtype), the mean
// of logsumexp(row) - logit[target] over rows whose target != ignore_index
// (0 when none). stats: f32 [N + 1]: the logsumexp of each row, then the
// number of counted rows (exact below 2^24).
void cross_entropy(const Tensor& loss, const Tensor& stats, const Tensor& logits, const Tensor& target,
                   int64_t ignore_index);
// grad_logits [N, C] = (softmax - onehot(target)) * grad_loss / count on
// counted rows, 0 on ignored rows. grad_loss (0-d) is read inside the kernel.
void cross_entropy_backward(const Tensor& grad_logits, const Tensor& grad_loss, const Tensor& logits,
                            const Tensor& target, const Tensor& stats, int64_t ignore_index);

// x, out: [rows, cols]; weight, bias: [cols] or undefined. stats: f32
// [rows, 2] = {mean, rstd} of each row, with rstd = 1 / sqrt(var + eps)
// (population variance).
void layer_norm(const Tensor& out, const Tensor& stats, const Tensor& x, const Tensor& weight,
                const Tensor& bias, double eps);
// Any of dx [rows, cols], dweight [cols], dbias [cols] may be undefined (not
// computed). dweight/dbias are sums over rows in a fixed partition and a
// fixed combine order (deterministic whatever the thread count).
void layer_norm_backward(const Tensor& dx, const Tensor& dweight, const Tensor& dbias, const Tensor& grad_out,
                         const Tensor& x, const Tensor& weight, const Tensor& stats);

// weight [V, D], indices [n] (i32/i64) -> out [n, D].
void embedding(const Tensor& out, const Tensor& weight, const Tensor& indices);
// grad_weight [V, D] = 0, then row indices[i] += grad_out[i] for each i in
// order (each thread owns a range of rows: deterministic, no atomics).
void embedding_backward(const Tensor& grad_weight, const Tensor& grad_out, const Tensor& indices);

// out = keep ? a / (1 - p) : 0 with keep = uniform(philox(offset + i, seed)
// word 0) >= p; mask (bool, may be undefined) records keep. state: i64 [2]
// {seed, offset}; the kernel advances offset by numel.
void dropout(const Tensor& out, const Tensor& mask, const Tensor& a, const Tensor& state, double p);
// grad_in = mask ? grad_out * scale : 0.
void dropout_backward(const Tensor& grad_in, const Tensor& grad_out, const Tensor& mask, double scale);

}  // namespace encore::cpu
