// backend::gather, scatter_add, topk and multinomial: the dtype checks, the
// index geometry (NOTE [ Index geometry ] in kernel_table.h), the argument
// structs and one launch of the backend kernel of the tensors' device
// (cpu/index.cpp, cuda/index.cu) with the one read/write list.
#include "encore/error.h"
#include "src/backends/dtype_checks.h"
#include "src/backends/kernels.h"
#include "src/core/stream.h"

namespace encore::backend {
namespace {

void check_index_dtype(DType t, const char* op) {
  ENCORE_CHECK(t == DType::kInt32 || t == DType::kInt64, "%s: index dtype %s is not supported (needs i32 or i64)",
               op, dtype_name(t));
}

void check_device(const char* op, Device device, std::initializer_list<const Tensor*> ts) {
  for (const Tensor* t : ts) {
    ENCORE_CHECK(t->device() == device, "%s: internal: every tensor must be on %s, got %s %s on %s", op,
                 device.str(), shape_str(t->shape()), dtype_name(t->dtype()), t->device().str());
  }
}

// The device's kernel error word, where its backend has one (NOTE [ Index checks ]).
uint32_t* error_word(Device device) {
  const NnKernels& k = *kernels_for(device).nn;
  return k.error_word != nullptr ? k.error_word(device.index) : nullptr;
}

void check_dense(const char* op, std::initializer_list<const Tensor*> ts) {
  for (const Tensor* t : ts) {
    ENCORE_CHECK(t->is_contiguous(), "%s: internal: %s %s must be contiguous", op, shape_str(t->shape()),
                 dtype_name(t->dtype()));
  }
}

// The geometry of `index` walked with `iter` (at p) and `addr` (at p with
// p[dim] = index[p]); the sizes the op checked: iter and addr at least
// index's size in every dim (addr: but dim).
IndexGeom index_geom(const char* op, const Tensor& index, int64_t dim, const Tensor& iter, const Tensor& addr) {
  const int64_t nd = index.dim();
  ENCORE_CHECK(iter.dim() == nd && addr.dim() == nd && dim >= 0 && (dim < nd || nd == 0),
               "%s: internal: index %s, %s and %s with dim %d", op, shape_str(index.shape()),
               shape_str(iter.shape()), shape_str(addr.shape()), dim);
  IndexGeom g{};
  g.ndim = static_cast<int32_t>(nd);
  g.dim = static_cast<int32_t>(dim);
  g.numel = index.numel();
  g.addr_dim_size = nd == 0 ? 1 : addr.size(dim);
  for (int64_t d = 0; d < nd; ++d) {
    ENCORE_CHECK(iter.size(d) >= index.size(d) && (d == dim || addr.size(d) >= index.size(d)),
                 "%s: internal: index %s does not fit %s and %s along dim %d", op, shape_str(index.shape()),
                 shape_str(iter.shape()), shape_str(addr.shape()), d);
    g.shape[d] = index.size(d);
    g.index_stride[d] = index.strides()[d];
    g.iter_stride[d] = iter.strides()[d];
    g.addr_stride[d] = addr.strides()[d];
  }
  return g;
}

}  // namespace

void gather(const Tensor& out, const Tensor& in, int64_t dim, const Tensor& index) {
  constexpr const char* kOp = "gather";
  check_index_dtype(index.dtype(), kOp);
  check_device(kOp, out.device(), {&in, &index});
  ENCORE_CHECK(out.dtype() == in.dtype() && out.shape() == index.shape(),
               "gather: internal: out %s %s for in %s %s and index %s", shape_str(out.shape()),
               dtype_name(out.dtype()), shape_str(in.shape()), dtype_name(in.dtype()), shape_str(index.shape()));
  const GatherArgs args{index_geom(kOp, index, dim, out, in), index.data_ptr(), out.data_ptr(), in.data_ptr(),
                        in.dtype(), index.dtype(), error_word(out.device())};
  current_stream(out.device())
      .launch(kernels_for(out.device()).index->gather, kOp, args, {in.storage(), index.storage()}, {out.storage()});
}

void scatter_add(const Tensor& out, int64_t dim, const Tensor& index, const Tensor& src) {
  constexpr const char* kOp = "scatter_add";
  check_numeric(out.dtype(), kOp);
  check_index_dtype(index.dtype(), kOp);
  check_device(kOp, out.device(), {&src, &index});
  ENCORE_CHECK(out.dtype() == src.dtype(), "scatter_add: internal: out %s but src %s", dtype_name(out.dtype()),
               dtype_name(src.dtype()));
  const ScatterAddArgs args{index_geom(kOp, index, dim, src, out), index.data_ptr(), src.data_ptr(),
                            out.data_ptr(), out.dtype(), index.dtype(), error_word(out.device())};
  // out is read (accumulated into) and written.
  current_stream(out.device())
      .launch(kernels_for(out.device()).index->scatter_add, kOp, args,
              {src.storage(), index.storage(), out.storage()}, {out.storage()});
}

void topk(const Tensor& values, const Tensor& indices, const Tensor& x, int64_t outer, int64_t n, int64_t inner,
          int64_t k, bool largest) {
  constexpr const char* kOp = "topk";
  check_numeric(x.dtype(), kOp);
  check_device(kOp, x.device(), {&values, &indices});
  check_dense(kOp, {&values, &indices, &x});
  ENCORE_CHECK(indices.dtype() == kInt64 && values.dtype() == x.dtype() && k <= n &&
                   values.numel() == outer * k * inner && x.numel() == outer * n * inner,
               "topk: internal: values %s %s, indices %s %s for x %s %s, k %d", shape_str(values.shape()),
               dtype_name(values.dtype()), shape_str(indices.shape()), dtype_name(indices.dtype()),
               shape_str(x.shape()), dtype_name(x.dtype()), k);
  const TopkArgs args{x.data_ptr(), values.data_ptr(), indices.data<int64_t>(), outer, n, inner, k, largest,
                      x.dtype()};
  current_stream(x.device())
      .launch(kernels_for(x.device()).index->topk, kOp, args, {x.storage()},
              {values.storage(), indices.storage()});
}

void multinomial(const Tensor& out, const Tensor& probs, int64_t samples, bool replacement, const Tensor& state) {
  constexpr const char* kOp = "multinomial";
  check_float(probs.dtype(), kOp);
  check_device(kOp, probs.device(), {&out, &state});
  check_dense(kOp, {&out, &probs, &state});
  ENCORE_CHECK(state.dtype() == kInt64 && state.numel() == 2,
               "multinomial: generator state must be i64 [2] {seed, offset}, got %s %s", shape_str(state.shape()),
               dtype_name(state.dtype()));
  ENCORE_CHECK(probs.dim() == 2 && out.dtype() == kInt64 && out.dim() == 2 && out.size(0) == probs.size(0) &&
                   out.size(1) == samples && (replacement || samples <= probs.size(1)),
               "multinomial: internal: out %s %s for probs %s and %d samples", shape_str(out.shape()),
               dtype_name(out.dtype()), shape_str(probs.shape()), samples);
  // Nothing to draw (the offset would advance by 0): an empty batch may ask
  // for 2^63 - 1 samples a row, and the kernels size their work with
  // classes x samples, past int64 (NOTE [ Empty tensors do no work ] in nn.cpp).
  if (out.numel() == 0) return;
  const MultinomialArgs args{probs.data_ptr(), out.data<int64_t>(), state.data<int64_t>(), probs.size(0),
                             probs.size(1),    samples,             replacement,           probs.dtype(),
                             error_word(probs.device())};
  current_stream(probs.device())
      .launch(kernels_for(probs.device()).index->multinomial, kOp, args, {probs.storage(), state.storage()},
              {out.storage(), state.storage()});
}

}  // namespace encore::backend
