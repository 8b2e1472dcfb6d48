// StorageList: the read or write list of one launch built from tensors some
// of which are optional (undefined tensors are left out), for the kernel
// families' host side (src/backends/<family>.cpp).
//
//   stream.launch_many(k.sum, "sum", args, StorageList{&a, &mean}.span(),   // mean may be undefined
//                      StorageList{&out, &partials}.span());
//
// It borrows the tensors' storages: use the span before the tensors go.
#pragma once

#include <cstddef>
#include <initializer_list>

#include "absl/types/span.h"
#include "encore/error.h"
#include "encore/tensor.h"

namespace encore::backend {

class StorageList {
 public:
  static constexpr size_t kMaxStorages = 8;

  StorageList(std::initializer_list<const Tensor*> tensors) {
    ENCORE_CHECK(tensors.size() <= kMaxStorages, "internal: a launch lists %d tensors, more than %d",
                 tensors.size(), kMaxStorages);
    for (const Tensor* t : tensors) {
      if (t->defined()) storages_[size_++] = t->storage();
    }
  }
  absl::Span<Storage* const> span() const { return absl::MakeConstSpan(storages_, size_); }

 private:
  Storage* storages_[kMaxStorages] = {};
  size_t size_ = 0;
};

}  // namespace encore::backend
