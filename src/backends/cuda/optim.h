// CUDA kernels of the optimizers: SGD and AdamW updates, the step counter,
// and the three kernels of global gradient-norm clipping.
// Same functions, arguments and contracts as src/backends/cpu/optim.h (read
// the contracts there, and NOTE [ Step state lives on the device ]): the
// learning rate, the step count and the clipping scale are read by the
// kernels from device memory, so a captured graph replays their current
// values. Every tensor argument lives on one CUDA device.
#pragma once

#include <cstdint>

#include "absl/types/span.h"
#include "encore/tensor.h"

namespace encore::cuda {

void sgd_update(const Tensor& param, const Tensor& grad, const Tensor& momentum_buf, const Tensor& lr,
                double momentum, bool nesterov, double weight_decay);
void adamw_update(const Tensor& param, const Tensor& grad, const Tensor& exp_avg, const Tensor& exp_avg_sq,
                  const Tensor& lr, const Tensor& step, double beta1, double beta2, double eps,
                  double weight_decay);
// `table` lives on the CUDA device (see cpu::adamw_update_many).
void adamw_update_many(const Tensor& table, int64_t count, int64_t total, DType dtype,
                       absl::Span<Storage* const> reads, absl::Span<Storage* const> writes, const Tensor& lr,
                       const Tensor& step, double beta1, double beta2, double eps, double weight_decay);
void increment(const Tensor& counter);
void sum_of_squares(const Tensor& x, const Tensor& partial, int64_t slot);
void clip_coefficient(const Tensor& partial, const Tensor& norm, const Tensor& scale, double max_norm);
void scale_in_place(const Tensor& x, const Tensor& scale);

}  // namespace encore::cuda
