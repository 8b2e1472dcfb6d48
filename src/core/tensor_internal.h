// Internal tensor construction helpers shared by ops and backends.
#pragma once

#include "encore/tensor.h"

namespace encore {

// empty() for the user-facing factories: a shape with a negative size or too
// many dims is refused naming op ("full", "randn", ...) instead of "empty".
Tensor empty_for(const char* op, Shape shape, DType dtype, Device device);
// The number of elements of `shape` (sizes >= 0), refused (encore::Error,
// InvalidArgument, naming `op` and the shape) when the product does not fit
// in int64: numel_of() would wrap, and a wrapped count sizes allocations and
// loops wrongly.
int64_t checked_numel(const char* op, absl::Span<const int64_t> shape);
// Row-major strides (elements) for shape; refused (naming `op` and the shape)
// when they do not fit in int64, which only an empty shape can reach.
Shape contiguous_strides(const char* op, absl::Span<const int64_t> shape);
// Refuses (encore::Error, InvalidArgument, naming `op`, the geometry and the
// storage) a view whose element offsets overflow or, unless it is empty,
// reach outside `storage`. NOTE [ Views stay inside their storage ].
void check_view_bounds(const char* op, const Storage& storage, DType dtype, absl::Span<const int64_t> shape,
                       absl::Span<const int64_t> strides, int64_t offset);
// A second storage over `nbytes` of memory at `data` that another storage
// owns: nobody frees it (until exchange_memory() hands it a block of its
// own) and the caller keeps the owner alive meanwhile. Two storages then
// name one memory, which breaks "same memory, same storage" for whatever
// sees both: GraphedStep's recorded call only (NOTE [ Inputs that are the
// step's own state ] in capture/graphed.cpp), to tell the step's reads
// through an input from its reads of the same memory as its own state.
// Not an allocation: no step observer hears of it.
Ref<Storage> borrow_storage(void* data, int64_t nbytes, Device device);
// A tensor sharing base's storage (and version counter) with the given
// geometry (sizes, strides and offset in elements), checked by
// check_view_bounds; no autograd history.
Tensor make_view(const char* op, const Tensor& base, Shape shape, Shape strides, int64_t offset);

}  // namespace encore
