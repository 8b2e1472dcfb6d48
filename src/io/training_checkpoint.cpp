#include "encore/training_checkpoint.h"

#include "absl/strings/str_cat.h"
#include "encore/checkpoint.h"

namespace encore {
namespace {

// The file's view of a run: model parameters and optimizer state, prefixed.
NamedTensors checkpoint_tensors(const nn::Module& model, const optim::Optimizer* opt) {
  NamedTensors out;
  for (auto& [name, t] : model.named_parameters()) out.emplace_back(absl::StrCat("model.", name), t);
  if (opt != nullptr) {
    for (auto& [name, t] : opt->state()) out.emplace_back(absl::StrCat("optim.", name), t);
  }
  return out;
}

}  // namespace

absl::Status save_checkpoint(const std::string& path, const nn::Module& model, const optim::Optimizer* opt) {
  return save_safetensors(path, checkpoint_tensors(model, opt), {{"format", "encore-training-checkpoint"}});
}

absl::Status load_checkpoint(const std::string& path, nn::Module& model, optim::Optimizer* opt) {
  if (opt != nullptr) {
    absl::Status created = status_of([&] { opt->init_state(); });
    if (!created.ok()) return created;
  }
  return load_into(path, checkpoint_tensors(model, opt));
}

}  // namespace encore
