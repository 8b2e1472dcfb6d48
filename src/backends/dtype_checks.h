// The dtype checks of the kernel families' host side: one message per class
// of dtypes, the same for every backend and every op.
//
//   backend::check_float(x.dtype(), "softmax");   // throws unless f32, f16 or bf16
#pragma once

#include "encore/dtype.h"

namespace encore::backend {

// f32, f16 or bf16; else encore::Error (InvalidArgument):
// "<op>: dtype <d> is not supported (needs f32, f16 or bf16)".
void check_float(DType t, const char* op);
// A float or an integer dtype (not bool); the same message as check_float.
void check_numeric(DType t, const char* op);

}  // namespace encore::backend
