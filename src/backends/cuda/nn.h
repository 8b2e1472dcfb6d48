// CUDA kernels for the neural-network ops: softmax, cross entropy, layer norm, embedding, dropout (fused forward and backward).
// Same functions, arguments and contracts as src/backends/cpu/nn.h (read the
// contracts there); every tensor argument lives on one CUDA device. Launches
// go through current_stream(device) (src/core/stream.h) so that capture and
// profiling see them; the kernels themselves are in nn.cu.
#pragma once

#include <cstdint>

#include "encore/tensor.h"
#include "src/backends/op_kinds.h"

namespace encore::cuda {

void softmax(const Tensor& out, const Tensor& x, int64_t outer, int64_t n, int64_t inner, bool log);
void softmax_backward(const Tensor& grad_in, const Tensor& grad_out, const Tensor& out, int64_t outer,
                      int64_t n, int64_t inner, bool log);
void cross_entropy(const Tensor& loss, const Tensor& stats, const Tensor& logits, const Tensor& target,
                   int64_t ignore_index);
void cross_entropy_backward(const Tensor& grad_logits, const Tensor& grad_loss, const Tensor& logits,
                            const Tensor& target, const Tensor& stats, int64_t ignore_index);
void layer_norm(const Tensor& out, const Tensor& stats, const Tensor& x, const Tensor& weight,
                const Tensor& bias, double eps);
void layer_norm_backward(const Tensor& dx, const Tensor& dweight, const Tensor& dbias, const Tensor& grad_out,
                         const Tensor& x, const Tensor& weight, const Tensor& stats);
void embedding(const Tensor& out, const Tensor& weight, const Tensor& indices);
void embedding_backward(const Tensor& grad_weight, const Tensor& grad_out, const Tensor& indices);
void dropout(const Tensor& out, const Tensor& mask, const Tensor& a, const Tensor& state, double p);
void dropout_backward(const Tensor& grad_in, const Tensor& grad_out, const Tensor& mask, double scale);

}  // namespace encore::cuda
