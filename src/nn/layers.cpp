// Linear, LayerNorm, Embedding, Dropout and Mlp.
#include <cmath>

#include "encore/nn.h"
#include "src/nn/init.h"

namespace encore::nn {
using detail::generator_of;
using detail::uniform;

Linear::Linear(int64_t in, int64_t out, bool with_bias, Init init) {
  ENCORE_CHECK(in > 0 && out > 0, "Linear: sizes must be positive, got in=%d out=%d", in, out);
  const double bound = 1.0 / std::sqrt(static_cast<double>(in));
  weight = register_parameter("weight", uniform({out, in}, bound, init));
  if (with_bias) bias = register_parameter("bias", uniform({out}, bound, init));
}

LayerNorm::LayerNorm(int64_t dim, double eps, Init init) : eps_(eps) {
  ENCORE_CHECK(dim > 0, "LayerNorm: dim must be positive, got %d", dim);
  ENCORE_CHECK(std::isfinite(eps) && eps >= 0, "LayerNorm: eps must be finite and non-negative, got %g", eps);
  weight = register_parameter("weight", ones({dim}, kFloat32, init.device));
  bias = register_parameter("bias", zeros({dim}, kFloat32, init.device));
}

Embedding::Embedding(int64_t num, int64_t dim, Init init) {
  ENCORE_CHECK(num > 0 && dim > 0, "Embedding: sizes must be positive, got num=%d dim=%d", num, dim);
  weight = register_parameter("weight", randn({num, dim}, kFloat32, init.device, &generator_of(init)));
}

Dropout::Dropout(double p) : p_(p) {
  ENCORE_CHECK(p >= 0.0 && p <= 1.0, "Dropout: p must be in [0, 1], got %g", p);   // NaN fails too
}

Mlp::Mlp(std::vector<int64_t> widths, Activation act, Init init) : act_(act) {
  ENCORE_CHECK(widths.size() >= 2, "Mlp: needs at least two widths (in and out), got %d", widths.size());
  for (size_t i = 0; i + 1 < widths.size(); ++i) {
    layers_.push_back(&register_module("layers." + std::to_string(i),
                                       std::make_unique<Linear>(widths[i], widths[i + 1], true, init)));
  }
}

Tensor Mlp::forward(const Tensor& x) const {
  Tensor h = x;
  for (size_t i = 0; i < layers_.size(); ++i) {
    h = layers_[i]->forward(h);
    if (i + 1 == layers_.size()) break;
    switch (act_) {
      case Activation::kRelu: h = relu(h); break;
      case Activation::kGelu: h = gelu(h, GeluApprox::kTanh); break;
      case Activation::kTanh: h = tanh(h); break;
    }
  }
  return h;
}

}  // namespace encore::nn
