// Argument checks shared by the CPU and CUDA optimizer launchers
// (src/backends/{cpu,cuda}/optim.cpp): each throws encore::Error
// (InvalidArgument) naming the op, the argument, what it must be and what
// came. Both backends check the same contract, so the text is written once.
//
//   backend::check_scalar("adamw", lr, kFloat32, "lr", DeviceType::kCUDA);
//   backend::check_like("adamw", param, exp_avg, kFloat32, "exp_avg");
#pragma once

#include "encore/tensor.h"

namespace encore::backend {

// t: one element of `dtype` on a device of `type` (the learning rate, the
// step count, a norm: read by the kernel where it runs).
void check_scalar(const char* op, const Tensor& t, DType dtype, const char* what, DeviceType type);

// t: param's shape, of `dtype`, on param's device (a gradient or optimizer
// state read beside the parameter).
void check_like(const char* op, const Tensor& param, const Tensor& t, DType dtype, const char* what);

// AdamW's parameter table (backend::AdamWEntry rows, NOTE [ One AdamW launch ]
// in src/optim/adamw.cpp): contiguous, exactly `count` rows, on a device of `type`.
void check_adamw_table(const Tensor& table, int64_t count, DeviceType type);

}  // namespace encore::backend
