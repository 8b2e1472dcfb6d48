// Counter-based random numbers (Philox 4x32-10).
//
// A Generator's state is a device tensor of two i64: {seed, offset}. Draw i
// of a request uses the Philox block at counter (offset + i) under key seed;
// the kernel that draws advances the offset by the number of elements, inside
// the kernel. Because the offset lives in device memory, a captured graph that
// draws (dropout) gets fresh numbers on every replay, exactly as eager steps.
//
//   encore::manual_seed(42);                         // default generators
//   encore::Tensor x = encore::randn({2, 3});        // N(0, 1), f32
//   encore::Generator g(7);                          // an independent stream
//   encore::Tensor u = encore::rand({4}, encore::kFloat32, encore::kCPU, &g);
#pragma once

#include <cstdint>

#include "encore/tensor.h"

namespace encore {

class Generator {
 public:
  explicit Generator(uint64_t seed = 0, Device device = kCPU);
  void manual_seed(uint64_t seed);           // resets the offset to 0 (host write)
  uint64_t seed() const;
  uint64_t offset() const;                   // host read: synchronises
  const Tensor& state() const { return state_; }   // i64 [2]: {seed, offset}
  Device device() const { return state_.device(); }

 private:
  Tensor state_;
};

// The process-wide generator of a device.
Generator& default_generator(Device device = kCPU);
// Seeds the default generator of every device.
void manual_seed(uint64_t seed);

// Uniform on [0, 1) and standard normal draws (float dtypes). `gen` is
// borrowed for the call (nullptr: default_generator(device)).
Tensor rand(Shape shape, DType dtype = kFloat32, Device device = kCPU, Generator* gen = nullptr);
Tensor randn(Shape shape, DType dtype = kFloat32, Device device = kCPU, Generator* gen = nullptr);

}  // namespace encore
