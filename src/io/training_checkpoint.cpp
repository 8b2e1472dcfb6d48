#include "encore/training_checkpoint.h"

#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "encore/autograd.h"
#include "encore/checkpoint.h"
#include "encore/device.h"
#include "src/io/safetensors_file.h"

namespace encore {
namespace {

// Set in the metadata when the optimizer's state was saved: its state names
// absent from the file were not created yet, and load as zeros.
constexpr char kOptimizerKey[] = "optimizer_state";

// One part of the file: the prefix of its names and the live tensors.
struct Part {
  std::string prefix;   // "model.", "optim.", "rng.", "schedule."
  NamedTensors tensors;   // full names
};

// The parts `state` names, for saving (no state created) or loading.
std::vector<Part> parts_of(const nn::Module& model, const TrainingState& state, const Tensor& schedule_step) {
  std::vector<Part> parts(1, Part{"model.", {}});
  for (auto& [name, t] : model.state_tensors()) parts[0].tensors.emplace_back(absl::StrCat("model.", name), t);
  if (state.optimizer != nullptr) {
    Part& p = parts.emplace_back(Part{"optim.", {}});
    for (auto& [name, t] : state.optimizer->state()) p.tensors.emplace_back(absl::StrCat("optim.", name), t);
  }
  if (state.schedule != nullptr) parts.push_back(Part{"schedule.", {{"schedule.step", schedule_step}}});
  std::vector<std::pair<std::string, Generator*>> gens = state.generators;
  if (state.default_generators) {
    gens.emplace_back("default.cpu", &default_generator(kCPU));
    if (cuda_available()) gens.emplace_back("default.cuda:0", &default_generator(Device::cuda(0)));
  }
  if (!gens.empty()) {
    Part& p = parts.emplace_back(Part{"rng.", {}});
    for (auto& [name, g] : gens) p.tensors.emplace_back(absl::StrCat("rng.", name), g->state());
  }
  return parts;
}

constexpr char kStepName[] = "schedule.step";

// The names `file` holds, in data order.
std::vector<std::string> names_in(const io::SafetensorsFile& file) {
  std::vector<std::string> out;
  for (auto& [name, shape] : file.shapes()) out.push_back(std::move(name));
  return out;
}

absl::Status refuse(absl::StatusCode code, const std::string& path, const std::string& name,
                    absl::string_view problem) {
  return absl::Status(code, absl::StrCat("load_checkpoint: ", path, ": tensor \"", name, "\": ", problem));
}

}  // namespace

absl::Status save_checkpoint(const std::string& path, const nn::Module& model, const TrainingState& state) {
  absl::Status s;
  Tensor step;
  std::vector<Part> parts;
  s = status_of([&] {
    if (state.schedule != nullptr) step = from_vector<int64_t>({state.schedule->current_step()}, Shape{}, kCPU);
    parts = parts_of(model, state, step);
  });
  if (!s.ok()) return s;
  NamedTensors all;
  for (Part& p : parts) all.insert(all.end(), p.tensors.begin(), p.tensors.end());
  std::map<std::string, std::string> metadata = {{"format", "encore-training-checkpoint"}};
  if (state.optimizer != nullptr) metadata[kOptimizerKey] = "saved";
  return save_safetensors(path, all, metadata);
}

absl::Status load_checkpoint(const std::string& path, nn::Module& model, const TrainingState& state,
                             const LoadOptions& options, LoadReport* report) {
  if (state.optimizer != nullptr) {
    absl::Status created = status_of([&] { state.optimizer->init_state(); });
    if (!created.ok()) return created;
  }
  Tensor step;
  std::vector<Part> parts;
  absl::Status s = status_of([&] {
    step = from_vector<int64_t>({0}, Shape{}, kCPU);
    parts = parts_of(model, state, step);
  });
  if (!s.ok()) return s;
  // NOTE [ One file per load ]: the metadata, the names and every tensor come
  // from one open descriptor and one parsed header, so a save that renames
  // another file over `path` meanwhile changes nothing this load sees.
  absl::StatusOr<io::SafetensorsFile> file = io::SafetensorsFile::open("load_checkpoint", path);
  if (!file.ok()) return file.status();
  const std::vector<std::string> in_file = names_in(*file);
  const absl::flat_hash_set<std::string> present(in_file.begin(), in_file.end());
  const bool lazy_optimizer_state = file->metadata().contains(kOptimizerKey);
  const bool has_step = state.schedule != nullptr && present.contains(kStepName);
  if (has_step) {   // read first: its value is checked before any live tensor is written
    s = file->load_into({{kStepName, step}}, LoadOptions{.strict = false, .convert_dtypes = true});
    if (!s.ok()) return s;
  }
  if (has_step && step.item<int64_t>() < 0) {   // set_step would refuse it, after every copy
    return refuse(absl::StatusCode::kInvalidArgument, path, kStepName,
                  absl::StrCat("is ", step.item<int64_t>(), "; a schedule's step is >= 0"));
  }
  LoadReport local;
  LoadReport& r = report != nullptr ? *report : local;
  r = LoadReport{};
  // Names first, so that nothing is written when a part does not match.
  NamedTensors targets, zeroed;   // zeroed: optimizer state the file's run had not created yet
  for (const Part& p : parts) {
    absl::flat_hash_set<std::string> wanted;
    for (const auto& [name, t] : p.tensors) {
      wanted.insert(name);
      if (present.contains(name)) {
        if (name != kStepName) targets.emplace_back(name, t);   // the step is read already
      } else if (p.prefix == "optim." && lazy_optimizer_state && name != "optim.lr") {
        zeroed.emplace_back(name, t);
      } else if (options.strict) {
        return refuse(absl::StatusCode::kNotFound, path, name, "not in the file (loading is strict)");
      } else {
        r.missing.push_back(name);
      }
    }
    for (const std::string& name : in_file) {
      if (!absl::StartsWith(name, p.prefix) || wanted.contains(name)) continue;
      if (options.strict) {
        return refuse(absl::StatusCode::kInvalidArgument, path, name,
                      "in the file but not in the model, optimizer, schedule or generators being loaded");
      }
      r.unexpected.push_back(name);
    }
  }
  LoadReport copied;
  s = file->load_into(targets, LoadOptions{.strict = false, .convert_dtypes = options.convert_dtypes}, &copied);
  if (!s.ok()) return s;
  r.converted = std::move(copied.converted);
  return status_of([&] {
    NoGradGuard no_grad;
    for (auto& [name, t] : zeroed) Tensor(t).zero_();
    if (has_step) state.schedule->set_step(step.item<int64_t>());
  });
}

absl::Status save_checkpoint(const std::string& path, const nn::Module& model, const optim::Optimizer* opt) {
  return save_checkpoint(path, model,
                         TrainingState{.optimizer = const_cast<optim::Optimizer*>(opt), .default_generators = false});
}

absl::Status load_checkpoint(const std::string& path, nn::Module& model, optim::Optimizer* opt) {
  return load_checkpoint(path, model, TrainingState{.optimizer = opt, .default_generators = false});
}

}  // namespace encore
