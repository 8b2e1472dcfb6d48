// encore: eager tensors and autograd whose training steps can be captured
// once and replayed. Include this one header to get the whole public API.
//
//   #include <encore/encore.h>
//   encore::Tensor w = encore::randn({4, 3}).requires_grad_();
//   encore::Tensor loss = encore::matmul(encore::ones({2, 4}), w).sum();
//   loss.backward();
#pragma once

#include "encore/autograd.h"
#include "encore/bucketing.h"
#include "encore/capture.h"
#include "encore/checkpoint.h"
#include "encore/device.h"
#include "encore/dist.h"
#include "encore/dtype.h"
#include "encore/error.h"
#include "encore/graphed.h"
#include "encore/hf_gpt2.h"
#include "encore/nn.h"
#include "encore/ops.h"
#include "encore/optim.h"
#include "encore/profile.h"
#include "encore/progress.h"
#include "encore/random.h"
#include "encore/tensor.h"
#include "encore/training_checkpoint.h"
