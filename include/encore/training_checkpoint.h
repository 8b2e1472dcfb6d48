// Checkpoints of a training run in one safetensors file (see checkpoint.h):
// a module's parameters and, as asked, its optimizer's state, the learning-
// rate schedule's position and random generators' states, so that a run
// saved at any step and resumed equals the uninterrupted run bit for bit.
//
//   encore::TrainingState state{.optimizer = &opt, .schedule = &sched,
//                               .generators = {{"data", &data_gen}}};
//   absl::Status s = encore::save_checkpoint("run.safetensors", model, state);
//   ...   // a new process: the same objects built afresh, then
//   s = encore::load_checkpoint("run.safetensors", model, state);   // strict
//   // Weights only, from a training checkpoint (the rest of the file is ignored):
//   s = encore::load_checkpoint("run.safetensors", model);
//
// Names in the file: "model.<dotted name>" for each parameter and persistent
// buffer (nn::Module::state_tensors(): BatchNorm's running statistics, not
// derived masks), "optim.<state name>"
// (optim::Optimizer::state(): "lr", "step", "exp_avg.<i>", ...),
// "schedule.step" (i64, WarmupCosine::current_step()) and "rng.<name>" (i64
// [2], Generator::state(); the default generators are "rng.default.cpu" and,
// where CUDA is available, "rng.default.cuda:0": a file's
// "rng.default.cuda:0" loaded where CUDA is not is passed over, as for a
// null generator below; a file without it loaded where CUDA is, is missing
// it like any other part: LoadOptions{.strict = false} loads it).
//
// Loading restores the parts the TrainingState names, and only those: every
// tensor of a named part must be in the file with its shape and dtype, and a
// named part's prefix in the file holds nothing else (LoadOptions relaxes
// both and converts float dtypes; LoadReport lists what it forgave). Values
// are copied into the existing tensors, so captured graphs that use them stay
// valid. Optimizer state not yet created when the file was saved (before the
// first step(), or for parameters never updated) loads as zeros, which is
// what the first step() would create: loading works at any step. Scalars
// are refused (InvalidArgument, naming the tensor and the value) where the
// objects' own setters or next step would refuse or break on them:
// "optim.lr" NaN, infinite or negative (as set_lr); the counts "optim.step"
// (AdamW's next step() divides by 1 - beta^t) and BatchNorm's
// "model.<...>.num_batches_tracked" (i64) negative or INT64_MAX (their next
// increment overflows); "schedule.step" negative (as set_step); a
// "rng.<name>" offset negative as an i64 (no run draws 2^63 numbers; any
// seed is valid). Other tensors load as they are. The optimizer's state is
// named by position in its parameter list ("exp_avg.3"): the file's
// metadata names the model parameter at each position, and a load into an
// optimizer whose parameter at a position is another of the model's is
// refused (InvalidArgument, naming both; NOTE [ Optimizer state by
// parameter ]), as its state would go to the wrong parameter. A refused file (a part
// that does not match, a value above) changes nothing: every check is made
// before the first value is copied.
// A load opens the file once and reads its header once: metadata, names
// and tensors all come from the file that was at `path` when the load
// began, even if a save replaces it meanwhile.
// Saves are atomic and crash leftovers are cleaned up as save_safetensors
// says (checkpoint.h); every error, a full disk included, is the Status.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "encore/checkpoint.h"
#include "encore/nn.h"
#include "encore/optim.h"
#include "encore/random.h"

namespace encore {

// The parts of a run a checkpoint holds besides the model's parameters. The
// pointers are not owned; null parts are neither saved nor loaded. That
// includes a generator entry whose pointer is null: its "rng.<name>" is not
// written, and a load passes over the file's tensor of that name (not read,
// not refused, not in LoadReport), as it passes over "optim." when the
// optimizer is null.
struct TrainingState {
  optim::Optimizer* optimizer = nullptr;
  optim::WarmupCosine* schedule = nullptr;
  // Generators of the run's own (data shuffling, ...), by name: "rng.<name>".
  std::vector<std::pair<std::string, Generator*>> generators;
  // Also the default generators (dropout and encore's own draws use them).
  bool default_generators = true;
};

[[nodiscard]] absl::Status save_checkpoint(const std::string& path, const nn::Module& model,
                                           const TrainingState& state);
// Creates the optimizer's state first (init_state) if it has none yet.
[[nodiscard]] absl::Status load_checkpoint(const std::string& path, nn::Module& model, const TrainingState& state,
                                           const LoadOptions& options = {}, LoadReport* report = nullptr);

// Model and optimizer only (no schedule, no generators).
[[nodiscard]] absl::Status save_checkpoint(const std::string& path, const nn::Module& model,
                                           const optim::Optimizer* opt = nullptr);
[[nodiscard]] absl::Status load_checkpoint(const std::string& path, nn::Module& model,
                                           optim::Optimizer* opt = nullptr);

}  // namespace encore
