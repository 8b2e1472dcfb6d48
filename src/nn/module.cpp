// Module: parameter registration, dotted names, train/eval, device moves.
#include "absl/container/flat_hash_set.h"
#include "encore/autograd.h"
#include "encore/nn.h"

namespace encore::nn {

Tensor Module::register_parameter(std::string name, Tensor t) {
  ENCORE_CHECK(t.defined(), "register_parameter: %s is undefined", name);
  t = t.detach();
  t.requires_grad_(true);
  params_.emplace_back(std::move(name), t);
  return t;
}

void Module::register_shared_parameter(std::string name, const Tensor& t) {
  ENCORE_CHECK(t.defined() && t.requires_grad(), "register_shared_parameter: %s is not a parameter", name);
  params_.emplace_back(std::move(name), t);
}

void Module::collect(const std::string& prefix, NamedTensors& out) const {
  for (const auto& [name, t] : params_) out.emplace_back(prefix + name, t);
  for (const auto& [name, child] : children_) child->collect(prefix + name + ".", out);
}

NamedTensors Module::named_parameters() const {
  NamedTensors all, unique;
  collect("", all);
  absl::flat_hash_set<TensorImpl*> seen;   // tied weights: keep the first name
  for (auto& entry : all) {
    if (seen.insert(entry.second.impl()).second) unique.push_back(std::move(entry));
  }
  return unique;
}

std::vector<Tensor> Module::parameters() const {
  std::vector<Tensor> out;
  for (auto& [name, t] : named_parameters()) out.push_back(t);
  return out;
}

void Module::train(bool on) {
  training_ = on;
  for (auto& [name, child] : children_) child->train(on);
}

void Module::to(Device device) {
  for (Tensor& p : parameters()) {
    if (p.device() == device) continue;
    Tensor moved = p.detach().to(device);
    TensorImpl* impl = p.impl();            // every handle of p sees the new storage
    impl->storage = moved.impl()->storage;
    impl->offset = moved.storage_offset();
    impl->strides = moved.strides();
    impl->contiguous = moved.is_contiguous();
    if (p.grad().defined()) p.set_grad(p.grad().to(device));
  }
}

void Module::to(DType dtype) {
  ENCORE_CHECK(is_floating(dtype), "Module::to: %s is not a float dtype", dtype_name(dtype));
  for (Tensor& p : parameters()) {
    if (p.dtype() == dtype) continue;
    Tensor converted = p.detach().to(dtype);
    TensorImpl* impl = p.impl();            // every handle of p sees the new storage
    impl->storage = converted.impl()->storage;
    impl->offset = converted.storage_offset();
    impl->strides = converted.strides();
    impl->dtype = dtype;
    impl->contiguous = converted.is_contiguous();
    p.set_grad(Tensor());
  }
}

void Module::zero_grad() {
  NoGradGuard no_grad;
  for (Tensor& p : parameters()) {
    if (p.grad().defined()) p.grad().zero_();
  }
}

}  // namespace encore::nn
