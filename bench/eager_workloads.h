// Workloads shared by the eager-overhead benchmark and the instruction
// counter, so that both measure exactly the same code.
#pragma once

#include "encore/encore.h"

namespace encore::bench {

// The 20-op elementwise chain on a [1, 16] tensor: ten rounds of y = y * w;
// y = y + b, then sum and backward into x, w and b.
struct Chain {
  Tensor x = full({1, 16}, 0.5).requires_grad_();
  Tensor w = full({1, 16}, 0.9).requires_grad_();
  Tensor b = full({1, 16}, 0.1).requires_grad_();
  void step() {
    Tensor y = x;
    for (int i = 0; i < 10; ++i) y = y * w + b;
    y.sum().backward();
  }
};

}  // namespace encore::bench
