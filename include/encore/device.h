// Where a tensor lives: the CPU, or one CUDA device when the CUDA backend is built.
//
//   encore::Device d = encore::default_device();   // CUDA:0 when a GPU is usable, else CPU
//   if (d.is_cpu()) { ... }
//   d.str();                                       // "cpu" or "cuda:0"
#pragma once

#include <cstdint>
#include <string>

namespace encore {

enum class DeviceType : uint8_t { kCPU, kCUDA };

struct Device {
  DeviceType type = DeviceType::kCPU;
  int8_t index = 0;  // CUDA ordinal; always 0 for the CPU

  static constexpr Device cpu() { return {DeviceType::kCPU, 0}; }
  // index in [0, 127]; another throws encore::Error (it used to wrap: cuda(256) was cuda:0).
  static constexpr Device cuda(int index = 0) {
    if (index < 0 || index > INT8_MAX) refuse_cuda_index(index);
    return {DeviceType::kCUDA, static_cast<int8_t>(index)};
  }
  constexpr bool is_cpu() const { return type == DeviceType::kCPU; }
  constexpr bool is_cuda() const { return type == DeviceType::kCUDA; }
  std::string str() const;
  friend constexpr bool operator==(Device a, Device b) { return a.type == b.type && a.index == b.index; }

 private:
  [[noreturn]] static void refuse_cuda_index(int index);
};

inline constexpr Device kCPU = Device::cpu();

// True when encore was built with the CUDA backend and a GPU answers.
bool cuda_available();
// CUDA:0 when cuda_available(), else the CPU.
Device default_device();

// Waits until every kernel encore queued on `device` has finished (CPU
// kernels finish at launch: returns at once). Throws encore::Error when a
// CUDA kernel failed, or when a kernel queued since the last synchronization
// met bad data, naming the op (an out-of-range class id in cross_entropy or
// index in embedding: CUDA ops do not check indices on the host, which would
// wait for the GPU at every call). Host reads (item(), to_vector(), printing,
// to(kCPU)) synchronize the same way. Inside a step given to capture() it
// makes capture() fail naming it, like a host read.
void synchronize(Device device);

}  // namespace encore
