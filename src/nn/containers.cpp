// Sequential and ModuleList.
#include "encore/nn.h"

namespace encore::nn {

Module& ModuleList::operator[](size_t i) const {
  ENCORE_CHECK(i < items_.size(), "%s: index %d out of range (size %d)", kind(), i, items_.size());
  return *items_[i];
}

Tensor Sequential::forward(const Tensor& x) const {
  Tensor h = x;
  for (const Module* m : *this) h = m->forward(h);
  return h;
}

}  // namespace encore::nn
