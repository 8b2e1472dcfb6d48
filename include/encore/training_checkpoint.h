// Checkpoints of a training run: a module's parameters and, optionally, its
// optimizer's state, in one safetensors file (see checkpoint.h).
//
//   absl::Status s = encore::save_checkpoint("run.safetensors", model, &opt);
//   ...
//   nn::Gpt fresh(cfg);
//   optim::AdamW fresh_opt(fresh.parameters());
//   s = encore::load_checkpoint("run.safetensors", fresh, &fresh_opt);   // strict
//
// Names in the file: "model.<dotted parameter name>" and "optim.<state name>"
// (optim::Optimizer::state(): "lr", "step", "exp_avg.<i>", ...). Loading is
// strict: every tensor of the model (and optimizer) must be in the file with
// its shape and dtype, and the file may hold nothing else. Values are copied
// into the existing tensors, so captured graphs that use them stay valid.
// Saves are atomic and crash leftovers are cleaned up as save_safetensors
// says (checkpoint.h); every error, a full disk included, is the Status.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "encore/nn.h"
#include "encore/optim.h"

namespace encore {

[[nodiscard]] absl::Status save_checkpoint(const std::string& path, const nn::Module& model,
                                           const optim::Optimizer* opt = nullptr);
// Creates the optimizer's state first (init_state) if it has none yet.
[[nodiscard]] absl::Status load_checkpoint(const std::string& path, nn::Module& model,
                                           optim::Optimizer* opt = nullptr);

}  // namespace encore
