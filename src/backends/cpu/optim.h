// CPU kernels of the optimizers (src/optim/): SGD and AdamW updates, the step
// counter, and the three kernels of global gradient-norm clipping.
//
// NOTE [ Step state lives on the device ] (encore/optim.h): the learning rate,
// the step count and the clipping scale are read by the kernels through
// pointers to tensor data, never passed as host values, so a captured graph
// replays with their current values. Each launcher lists every storage its
// kernel reads or writes.
//
//   cpu::increment(step);                                 // step: i64 0-d
//   cpu::adamw_update(p, p.grad(), m, v, lr, step, 0.9, 0.999, 1e-8, 0.01);
//
// Parameters and gradients: f32, f16 or bf16 (same dtype, same shape, any
// strides); updates compute in f32. State tensors (momentum, m, v) are f32 of
// the parameter's shape. lr: f32 with one element.
#pragma once

#include <cstdint>

#include "absl/types/span.h"
#include "encore/tensor.h"

namespace encore::cpu {

// One SGD step in place (PyTorch semantics, dampening 0). momentum_buf is
// undefined for plain SGD (momentum == 0), else it is read and updated.
void sgd_update(const Tensor& param, const Tensor& grad, const Tensor& momentum_buf, const Tensor& lr,
                double momentum, bool nesterov, double weight_decay);

// One AdamW step in place; reads lr (f32) and the step count t (i64, already
// incremented for this step) from device memory.
void adamw_update(const Tensor& param, const Tensor& grad, const Tensor& exp_avg, const Tensor& exp_avg_sq,
                  const Tensor& lr, const Tensor& step, double beta1, double beta2, double eps,
                  double weight_decay);

// counter += 1 (i64, one element).
// One AdamW update of many parameters in one launch (the same bits as one
// adamw_update per parameter). `table`: a dense CPU tensor holding `count`
// backend::AdamWEntry rows (src/backends/optim_table.h) whose arrays are all
// dense, `total` elements in all; every parameter has `dtype`. `reads` / `writes`: every storage the
// update reads (table, p, g, m, v, lr, step) / writes (p, m, v).
void adamw_update_many(const Tensor& table, int64_t count, int64_t total, DType dtype,
                       absl::Span<Storage* const> reads, absl::Span<Storage* const> writes, const Tensor& lr,
                       const Tensor& step, double beta1, double beta2, double eps, double weight_decay);
void increment(const Tensor& counter);

// partial[slot] = sum of x^2 (x float, any strides; partial f32 contiguous).
// Summed in double over fixed chunks, so the result does not depend on the
// number of threads.
void sum_of_squares(const Tensor& x, const Tensor& partial, int64_t slot);

// norm = sqrt(sum(partial)); scale = min(1, max_norm / (norm + 1e-6)).
// partial: f32 [P]; norm and scale: f32 with one element.
void clip_coefficient(const Tensor& partial, const Tensor& norm, const Tensor& scale, double max_norm);

// x *= scale[0] in place (x float, any strides, no broadcast dims); writes
// nothing when scale[0] >= 1 or is NaN.
void scale_in_place(const Tensor& x, const Tensor& scale);

}  // namespace encore::cpu
