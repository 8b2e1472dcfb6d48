// Module: parameter registration, dotted names, train/eval, device moves.
#include <cxxabi.h>

#include <cstdlib>
#include <typeinfo>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_format.h"
#include "encore/autograd.h"
#include "encore/nn.h"
#include "src/core/step_observer.h"

namespace encore::nn {

Module::Module() : training_(make_ref<HostFlag>()) {
  training_->value = true;
  training_->what = "the training mode of a module";
  training_->when_true = "train()";
  training_->when_false = "eval()";
}

Module::~Module() = default;

bool Module::is_training() const { return read_host_flag(*training_); }

namespace {
// The dynamic type of m, demangled ("encore::nn::Linear"), for messages.
std::string type_name(const Module& m) {
  int status = 0;
  char* name = abi::__cxa_demangle(typeid(m).name(), nullptr, nullptr, &status);
  const std::string type = status == 0 && name != nullptr ? name : typeid(m).name();
  std::free(name);
  return type;
}
}  // namespace

// One name per parameter, buffer or child of a module: a second would give
// two state tensors one dotted name (which a checkpoint could not tell apart).
void Module::check_new_name(const std::string& name, const char* what) const {
  ENCORE_CHECK(!name.empty(), "%s: cannot register a %s with an empty name", type_name(*this), what);
  const char* taken = nullptr;
  for (const auto& entry : params_) {
    if (entry.first == name) taken = "parameter";
  }
  for (const auto& entry : buffers_) {
    if (entry.first == name) taken = "buffer";
  }
  for (const auto& entry : children_) {
    if (entry.first == name) taken = "module";
  }
  ENCORE_CHECK(taken == nullptr, "%s: cannot register the %s \"%s\": a %s of that name is already registered",
               type_name(*this), what, name, taken == nullptr ? "" : taken);
}

Tensor Module::register_parameter(std::string name, Tensor t) {
  ENCORE_CHECK(t.defined(), "register_parameter: %s is undefined", name);
  check_new_name(name, "parameter");
  // A leaf is registered itself, so that the caller's handle and the
  // module's are one parameter (a detached twin would share the memory but
  // not the gradient: the caller's handle would collect gradients that no
  // optimizer over parameters() sees). A non-leaf (a result of ops) becomes
  // a new leaf over its values.
  if (!t.is_leaf()) t = t.detach();
  t.requires_grad_(true);
  params_.emplace_back(std::move(name), t);
  return t;
}

void Module::register_shared_parameter(std::string name, const Tensor& t) {
  ENCORE_CHECK(t.defined() && t.requires_grad(), "register_shared_parameter: %s is not a parameter", name);
  check_new_name(name, "parameter");
  params_.emplace_back(std::move(name), t);
}

Tensor Module::register_buffer(std::string name, Tensor t, bool persistent) {
  ENCORE_CHECK(t.defined(), "register_buffer: %s is undefined", name);
  check_new_name(name, "buffer");
  buffers_.emplace_back(std::move(name), t);
  persistent_.push_back(persistent);
  return t;
}

namespace {
// A name with a dot can repeat a child's dotted name (a parameter "b.c"
// beside a child "b" with a parameter "c"): two tensors one name, which a
// checkpoint cannot tell apart. Refused where the names are collected.
const NamedTensors& check_unique_names(const NamedTensors& named, const Module& m) {
  absl::flat_hash_set<absl::string_view> seen;
  for (const auto& [name, t] : named) {
    ENCORE_CHECK(seen.insert(name).second,
                 "%s: two tensors have the dotted name \"%s\" (a name registered with a '.' repeats the name a "
                 "child module's tensor gets); rename one",
                 type_name(m), name);
  }
  return named;
}
}  // namespace

void Module::collect(const std::string& prefix, NamedTensors& out, Kind kind) const {
  if (kind == Kind::kParameters) {
    for (const auto& [name, t] : params_) out.emplace_back(prefix + name, t);
  } else {
    for (size_t i = 0; i < buffers_.size(); ++i) {
      if (kind == Kind::kBuffers || persistent_[i]) out.emplace_back(prefix + buffers_[i].first, buffers_[i].second);
    }
  }
  for (const auto& [name, child] : children_) child->collect(prefix + name + ".", out, kind);
}

NamedTensors Module::named_buffers() const {
  NamedTensors out;
  collect("", out, Kind::kBuffers);
  check_unique_names(out, *this);
  return out;
}

NamedTensors Module::state_tensors() const {
  NamedTensors out = named_parameters();
  collect("", out, Kind::kPersistentBuffers);
  check_unique_names(out, *this);
  return out;
}

Tensor Module::forward(const Tensor&) const {
  throw_error(absl::StatusCode::kUnimplemented,
              absl::StrFormat("%s has no one-tensor forward(); call its own methods instead "
                              "(Sequential holds only modules that have one)", type_name(*this)));
}

NamedTensors Module::named_persistent_buffers() const {
  NamedTensors out;
  collect("", out, Kind::kPersistentBuffers);
  check_unique_names(out, *this);
  return out;
}

namespace {
// Points every handle of t at `moved`'s data (same shape): the in-place move
// behind Module::to.
void rebind(Tensor& t, const Tensor& moved) {
  TensorImpl* impl = t.impl();
  impl->storage = moved.impl()->storage;
  impl->offset = moved.storage_offset();
  impl->strides = moved.strides();
  impl->dtype = moved.dtype();
  impl->contiguous = moved.is_contiguous();
}
}  // namespace

NamedTensors Module::named_parameters() const {
  NamedTensors all, unique;
  collect("", all, Kind::kParameters);
  absl::flat_hash_set<TensorImpl*> seen;   // tied weights: keep the first name
  for (auto& entry : all) {
    if (seen.insert(entry.second.impl()).second) unique.push_back(std::move(entry));
  }
  check_unique_names(unique, *this);
  return unique;
}

std::vector<Tensor> Module::parameters() const {
  std::vector<Tensor> out;
  for (auto& [name, t] : named_parameters()) out.push_back(t);
  return out;
}

void Module::train(bool on) {
  write_host_flag(*training_, on);
  for (auto& [name, child] : children_) child->train(on);
}

void Module::to(Device device) {
  for (Tensor& p : parameters()) {
    if (p.device() == device) continue;
    rebind(p, p.detach().to(device));       // every handle of p sees the new storage
    if (p.grad().defined()) p.set_grad(p.grad().to(device));
  }
  for (auto& [name, b] : named_buffers()) {
    if (b.device() != device) rebind(b, b.to(device));
  }
}

void Module::to(DType dtype) {
  ENCORE_CHECK(is_floating(dtype), "Module::to: %s is not a float dtype", dtype_name(dtype));
  for (Tensor& p : parameters()) {
    if (p.dtype() == dtype) continue;
    p.set_grad(Tensor());
    rebind(p, p.detach().to(dtype));        // every handle of p sees the new storage
  }
  // Float buffers too (batch norm's running statistics), as PyTorch does.
  for (auto& [name, b] : named_buffers()) {
    if (is_floating(b.dtype()) && b.dtype() != dtype) rebind(b, b.to(dtype));
  }
}

void Module::zero_grad() {
  for (const Tensor& p : parameters()) autograd::zero_grad(p);   // lazily: NOTE [ Lazy zero_grad ]
}

}  // namespace encore::nn
