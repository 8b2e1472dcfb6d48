#include "encore/training_checkpoint.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
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
  // Names of null generator entries ("rng.<name>"): neither saved nor loaded,
  // and on load the file's tensor of that name is passed over, not refused.
  absl::flat_hash_set<std::string> passed_over;
};

// The parts `state` names, for saving (no state created) or loading.
std::vector<Part> parts_of(const nn::Module& model, const TrainingState& state, const Tensor& schedule_step) {
  std::vector<Part> parts(1, Part{"model.", {}, {}});
  for (auto& [name, t] : model.state_tensors()) parts[0].tensors.emplace_back(absl::StrCat("model.", name), t);
  if (state.optimizer != nullptr) {
    Part& p = parts.emplace_back(Part{"optim.", {}, {}});
    for (auto& [name, t] : state.optimizer->state()) p.tensors.emplace_back(absl::StrCat("optim.", name), t);
  }
  if (state.schedule != nullptr) parts.push_back(Part{"schedule.", {{"schedule.step", schedule_step}}, {}});
  std::vector<std::pair<std::string, Generator*>> gens = state.generators;
  if (state.default_generators) {
    gens.emplace_back("default.cpu", &default_generator(kCPU));
    // Without CUDA there is no CUDA generator to restore: a file saved where
    // there was one (a GPU run resumed on a CPU machine) has its state passed
    // over, as a null entry's.
    gens.emplace_back("default.cuda:0", cuda_available() ? &default_generator(Device::cuda(0)) : nullptr);
  }
  if (!gens.empty()) {
    Part& p = parts.emplace_back(Part{"rng.", {}, {}});
    for (auto& [name, g] : gens) {
      if (g == nullptr) {
        p.passed_over.insert(absl::StrCat("rng.", name));
      } else {
        p.tensors.emplace_back(absl::StrCat("rng.", name), g->state());
      }
    }
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

// NOTE [ Checked values ]: the scalars of a checkpoint are state that the
// objects' own setters check ("optim.lr": check_lr; "schedule.step":
// set_step) or that their next step runs from: counts that the step
// increments first and must not overflow ("optim.step": AdamW's bias
// correction divides by 1 - beta^t, zero at t = 0; BatchNorm's
// "model.<...>.num_batches_tracked": with momentum nullopt the update
// factor is 1 / the count) and generators ("rng.<name>": {seed, offset}; an
// offset counts draws, < 2^63 in any run). A corrupt or hand-edited file
// must not load a value the API would refuse, and a refused load changes
// nothing: these are read into CPU copies and checked before any live
// tensor is written, then copied in last. Tensors with no rule here
// (weights, moments, running statistics) load as they are.
constexpr char kBatchCount[] = ".num_batches_tracked";

bool has_value_rule(const std::string& name) {
  return name == "optim.lr" || name == "optim.step" || name == kStepName || absl::StartsWith(name, "rng.") ||
         (absl::StartsWith(name, "model.") && absl::EndsWith(name, kBatchCount));
}

// What is wrong with the value (a CPU tensor with the live tensor's shape and
// dtype) of `name`, or "" when has_value_rule's rule holds.
std::string value_problem(const std::string& name, const Tensor& value) {
  if (name == "optim.lr") {
    const float lr = value.item<float>();
    if (!(std::isfinite(lr) && lr >= 0.0f)) return absl::StrCat("is ", lr, "; a learning rate is finite and >= 0");
  } else if (name == kStepName) {
    const int64_t step = value.item<int64_t>();
    if (step < 0) return absl::StrCat("is ", step, "; a schedule's step is >= 0");
  } else if (name == "optim.step" || absl::EndsWith(name, kBatchCount)) {
    if (value.dtype() != kInt64 || value.numel() != 1) return "";   // a buffer of another kind: no rule
    const int64_t count = value.item<int64_t>();
    if (count < 0) return absl::StrCat("is ", count, "; a count is >= 0");
    if (count == std::numeric_limits<int64_t>::max()) {
      return absl::StrCat("is ", count, "; its next increment would overflow it");
    }
  } else if (absl::StartsWith(name, "rng.")) {
    const int64_t offset = value.to_vector<int64_t>()[1];   // {seed, offset}: any seed is valid
    if (offset < 0) return absl::StrCat("has offset ", offset, "; a generator's offset is >= 0");
  }
  return "";
}

// What a load reads, and where it goes.
struct LoadPlan {
  NamedTensors targets;               // live tensors, read in place
  NamedTensors checked;               // NOTE [ Checked values ]: CPU copies of the scalars
  std::vector<Tensor> checked_into;   // the live tensor of each (undefined: the schedule's step)
  NamedTensors zeroed;                // optimizer state the file's run had not created yet
  std::vector<std::string> order;     // every name read, in the parts' order (for the report)
  bool has_step = false;              // "schedule.step" is read (into parts_of's `schedule_step`)
};

// Matches the parts' names against the file's `in_file` before anything is
// read: a strict load refuses a missing or extra name, a lenient one lists
// it in `r`.
absl::Status plan_load(const std::string& path, const std::vector<Part>& parts, const std::vector<std::string>& in_file,
                       bool lazy_optimizer_state, const LoadOptions& options, LoadReport& r, LoadPlan& plan) {
  const absl::flat_hash_set<std::string> present(in_file.begin(), in_file.end());
  for (const Part& p : parts) {
    absl::flat_hash_set<std::string> wanted;
    for (const auto& [name, t] : p.tensors) {
      wanted.insert(name);
      if (present.contains(name)) {
        plan.order.push_back(name);
        if (!has_value_rule(name)) {
          plan.targets.emplace_back(name, t);
        } else if (name == kStepName) {   // no live tensor: set_step, last
          plan.checked.emplace_back(name, t);
          plan.checked_into.emplace_back();
          plan.has_step = true;
        } else {
          plan.checked.emplace_back(name, empty(t.shape(), t.dtype(), kCPU));
          plan.checked_into.push_back(t);
        }
      } else if (p.prefix == "optim." && lazy_optimizer_state && name != "optim.lr") {
        plan.zeroed.emplace_back(name, t);
      } else if (options.strict) {
        return refuse(absl::StatusCode::kNotFound, path, name, "not in the file (loading is strict)");
      } else {
        r.missing.push_back(name);
      }
    }
    for (const std::string& name : in_file) {
      if (!absl::StartsWith(name, p.prefix) || wanted.contains(name) || p.passed_over.contains(name)) continue;
      if (options.strict) {
        return refuse(absl::StatusCode::kInvalidArgument, path, name,
                      "in the file but not in the model, optimizer, schedule or generators being loaded");
      }
      r.unexpected.push_back(name);
    }
  }
  return absl::OkStatus();
}

// NOTE [ Optimizer state by parameter ]: an optimizer's state is named by
// its parameters' positions ("exp_avg.3"), so an optimizer built over the
// same parameters in another order (same shapes) would load another
// parameter's moments, silently. The file's metadata names the model
// parameter at each position ("optimizer_param.<i>": its dotted name, or
// "" for a tensor the model does not hold), and a load refuses a position
// whose parameter differs. Files without the entries load as before.
constexpr char kOptimizerParamKey[] = "optimizer_param.";

std::vector<std::string> optimizer_param_names(const nn::Module& model, const optim::Optimizer& opt) {
  absl::flat_hash_map<const TensorImpl*, std::string> name_of;
  for (const auto& [name, t] : model.named_parameters()) name_of.emplace(t.impl(), name);
  std::vector<std::string> out;
  for (const Tensor& p : opt.params()) {
    const auto it = name_of.find(p.impl());
    out.push_back(it != name_of.end() ? it->second : std::string());
  }
  return out;
}

absl::Status check_optimizer_params(const std::string& path, const std::map<std::string, std::string>& metadata,
                                    const std::vector<std::string>& here) {
  for (size_t i = 0; i < here.size(); ++i) {
    const auto it = metadata.find(absl::StrCat(kOptimizerParamKey, i));
    if (it == metadata.end() || it->second.empty() || here[i].empty() || it->second == here[i]) continue;
    return absl::InvalidArgumentError(absl::StrFormat(
        "load_checkpoint: %s: the optimizer's parameter %d is the model's \"%s\" here but was \"%s\" in the "
        "saved run, so its state (\"optim.*.%d\") belongs to another parameter; build the optimizer over the "
        "parameters in the order the saved run did",
        path, i, here[i], it->second, i));
  }
  return absl::OkStatus();
}

// Orders `converted` ("<name>: f64 -> f32") as `names` are.
void sort_by(std::vector<std::string>& converted, const std::vector<std::string>& names) {
  absl::flat_hash_map<std::string, size_t> index;
  for (size_t i = 0; i < names.size(); ++i) index.emplace(names[i], i);
  auto name_of = [](const std::string& c) { return c.substr(0, c.rfind(": ")); };
  std::stable_sort(converted.begin(), converted.end(),
                   [&](const std::string& a, const std::string& b) { return index[name_of(a)] < index[name_of(b)]; });
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
  if (state.optimizer != nullptr) {
    metadata[kOptimizerKey] = "saved";
    std::vector<std::string> names;
    s = status_of([&] { names = optimizer_param_names(model, *state.optimizer); });
    if (!s.ok()) return s;
    // NOTE [ Optimizer state by parameter ].
    for (size_t i = 0; i < names.size(); ++i) metadata[absl::StrCat(kOptimizerParamKey, i)] = names[i];
  }
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
  LoadReport local;
  LoadReport& r = report != nullptr ? *report : local;
  r = LoadReport{};
  LoadPlan plan;
  absl::Status planned;   // the names' verdict; status_of's: an allocation that threw
  s = status_of([&] {
    planned = plan_load(path, parts, names_in(*file), file->metadata().contains(kOptimizerKey), options, r, plan);
  });
  if (!s.ok()) return s;
  if (!planned.ok()) return planned;
  if (state.optimizer != nullptr) {   // NOTE [ Optimizer state by parameter ]
    std::vector<std::string> here;
    s = status_of([&] { here = optimizer_param_names(model, *state.optimizer); });
    if (!s.ok()) return s;
    s = check_optimizer_params(path, file->metadata(), here);
    if (!s.ok()) return s;
  }
  const LoadOptions read_options{.strict = false, .convert_dtypes = options.convert_dtypes};
  LoadReport checked_report, copied;
  s = file->load_into(plan.checked, read_options, &checked_report);
  if (!s.ok()) return s;
  for (const auto& entry : plan.checked) {   // not a structured binding: clang 14 cannot capture one
    std::string problem;
    s = status_of([&] { problem = value_problem(entry.first, entry.second); });
    if (!s.ok()) return s;
    if (!problem.empty()) return refuse(absl::StatusCode::kInvalidArgument, path, entry.first, problem);
  }
  s = file->load_into(plan.targets, read_options, &copied);
  if (!s.ok()) return s;
  r.converted = std::move(copied.converted);
  r.converted.insert(r.converted.end(), checked_report.converted.begin(), checked_report.converted.end());
  sort_by(r.converted, plan.order);
  return status_of([&] {
    NoGradGuard no_grad;
    for (auto& [name, t] : plan.zeroed) Tensor(t).zero_();
    for (size_t i = 0; i < plan.checked.size(); ++i) {
      if (plan.checked_into[i].defined()) Tensor(plan.checked_into[i]).copy_(plan.checked[i].second);
    }
    if (plan.has_step) state.schedule->set_step(step.item<int64_t>());
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
