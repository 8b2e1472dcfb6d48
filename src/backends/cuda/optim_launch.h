// Launchers of the CUDA optimizer kernels (optim.cu) and their argument
// structs, filled on the host by optim.cpp. nvcc-safe: no Abseil, no tensors.
#pragma once

#include <cstdint>

#include "encore/dtype.h"
#include "src/backends/layout.h"
#include "src/backends/optim_table.h"

namespace encore::cuda {

// Operands: param, grad (dtype), and with momentum the f32 buffer.
struct SgdArgs {
  backend::Layout<3> l;        // operand 2: the buffer (not touched without momentum)
  DType dtype;
  bool has_momentum, nesterov;
  const float* lr;             // device scalar
  float momentum, weight_decay;
};

// Operands: param, grad (dtype), exp_avg, exp_avg_sq (f32).
struct AdamWArgs {
  backend::Layout<4> l;
  DType dtype;
  const float* lr;             // device scalar: this step's learning rate
  const int64_t* step;         // device scalar: t, counting this step (t >= 1)
  float beta1, beta2, eps, weight_decay;
};

// Every row of a device table of backend::AdamWEntry (dense arrays of
// `dtype`); `total` = the sum of numel. Blocks take fixed chunks of the
// concatenated elements, so one launch covers all parameters.
struct AdamWManyArgs {
  const backend::AdamWEntry* table;   // device memory
  int64_t count, total;
  DType dtype;
  const float* lr;
  const int64_t* step;
  float beta1, beta2, eps, weight_decay;
};

struct IncrementArgs { int64_t* counter; };

// Pass 1: per-block sums of x^2 (double) into `blocks` slots of `scratch`;
// pass 2: their sum, in block order, rounded to f32 into *out.
struct SumSquaresArgs {
  backend::Layout<1> l;
  DType dtype;
  double* scratch;             // `blocks` doubles (an encore temporary)
  int blocks;
  float* out;
};

struct ClipCoefArgs { const float* partial; int64_t n; float* norm; float* scale; double max_norm; };

struct ClipScaleArgs {
  backend::Layout<1> l;
  DType dtype;
  const float* scale;          // device scalar: no-op unless < 1
};

void sgd_launch(const SgdArgs& a);
void adamw_launch(const AdamWArgs& a);
void adamw_many_launch(const AdamWManyArgs& a);
void increment_launch(const IncrementArgs& a);
void sum_of_squares_launch(const SumSquaresArgs& a);
void clip_coefficient_launch(const ClipCoefArgs& a);
void clip_scale_launch(const ClipScaleArgs& a);

// Blocks of pass 1 of sum_of_squares for n elements (the scratch size).
int sum_of_squares_blocks(int64_t n);

}  // namespace encore::cuda
