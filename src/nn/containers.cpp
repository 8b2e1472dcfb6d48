// Sequential and ModuleList.
#include "encore/nn.h"

namespace encore::nn {

Tensor Sequential::forward(const Tensor& x) const {
  Tensor h = x;
  for (const Module* m : items_) h = m->forward(h);
  return h;
}

Module& Sequential::operator[](size_t i) const {
  ENCORE_CHECK(i < items_.size(), "Sequential: index %d out of range (size %d)", i, items_.size());
  return *items_[i];
}

Module& ModuleList::operator[](size_t i) const {
  ENCORE_CHECK(i < items_.size(), "ModuleList: index %d out of range (size %d)", i, items_.size());
  return *items_[i];
}

}  // namespace encore::nn
