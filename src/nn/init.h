// Initialisation helpers shared by the layers (layers.cpp, cnn.cpp).
#pragma once

#include <utility>

#include "encore/nn.h"

namespace encore::nn::detail {

// The generator an Init names, or the default one of its device.
inline Generator& generator_of(const Init& init) {
  return init.gen != nullptr ? *init.gen : default_generator(init.device);
}

// U(-bound, bound), f32, on init.device.
inline Tensor uniform(Shape shape, double bound, const Init& init) {
  return rand(std::move(shape), kFloat32, init.device, &generator_of(init)) * (2 * bound) - bound;
}

}  // namespace encore::nn::detail
