// The CUDA runtime seen from encore: device discovery, encore's stream per
// device, and the one macro family that turns CUDA and cuBLAS error codes into
// absl::Status (boundary functions) or encore::Error (ops); never exit/abort.
//
//   ENCORE_RETURN_IF_CUDA_ERROR(cudaMemcpy(dst, src, n, cudaMemcpyDefault), "copy to host");
//   ENCORE_CUDA_CHECK(cudaStreamSynchronize(s), "synchronize");   // throws encore::Error
//   absl::StatusOr<int> n = encore::cuda::device_count();         // Unavailable without a driver
#pragma once

#include <cuda_runtime.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_format.h"
#include "src/backends/cuda/launch.h"
#include "src/backends/cuda/status.h"

namespace encore::cuda {

// A Status for a CUDA error: code kUnavailable for "no usable device",
// kInternal otherwise; the message names `what`, the error name and string.
absl::Status cuda_status(cudaError_t err, const char* what);
// cuda_status() of a failed call, after clearing what the failure left: the
// thread's last error (or the next check_launch would blame another op) and a
// launch error noted before it (reported now or never). The checking macros'
// failure function, and what check() (launch.h) throws.
absl::Status cuda_failure(cudaError_t err, const char* what);

// Number of usable CUDA devices, or why there is none.
[[nodiscard]] absl::StatusOr<int> device_count();

// Makes `index` the calling thread's current device (cheap when it already is).
void set_device(int index);

// encore's stream on device `index` (created on first use).
cudaStream_t stream_for(int index);

// Waits for all work queued on encore's stream of device `index`; throws
// encore::Error if a kernel failed.
void synchronize(int index);

// NOTE [ Kernel error words ]: kernels that meet bad DATA (an out-of-range
// class id or embedding index; src/core/kernel_errors.h) cannot throw and
// must not stop the stream for the host. Each device has one 32-bit word in
// mapped pinned host memory, allocated with its stream (so never during a
// stream capture); such a kernel skips the bad item and sets a KernelError
// bit there with a system-scope atomicOr. Host-side the word holds what the
// kernels that have finished reported; Stream::synchronize() and
// take_kernel_errors() read and clear it after waiting for the stream.
// Graph::replay() also reads it without waiting, to refuse a replay after a
// bad one that has finished; there a kernel still running could set its bit
// between the host's read and clear (host and device atomics on mapped
// memory are not atomic with each other), so a report can be seen twice —
// never lost, since reports are only ever set.
//
// The word's device-visible address: kernel arguments carry it (stable for
// the life of the process, so captured graphs may hold it).
uint32_t* error_word(int index);
// Reads and clears device `index`'s word (no synchronization: call it after
// synchronize() to see every report of the work queued before).
uint32_t take_error_word(int index);

// A CUDA event for timing and ordering work on encore's stream of a device.
// Owns its cudaEvent_t; movable, not copyable; destroy it on any thread.
//
//   cuda::Event start(0), stop(0);
//   start.record(); ...launches...; stop.record();
//   stop.synchronize();
//   float ms = stop.elapsed_ms(start);   // GPU time between the two records
class Event {
 public:
  // timing = false makes a lighter event for ordering only (elapsed_ms then throws).
  explicit Event(int device, bool timing = true);
  ~Event();
  Event(Event&& other) noexcept;
  Event& operator=(Event&& other) noexcept;
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;

  // Records the event on encore's stream of the device (legal during capture:
  // it becomes an event-record node).
  void record();
  // Blocks until the work queued before the last record() finished.
  void synchronize() const;
  // True when that work has finished (or record() was never called).
  bool query() const;
  // Milliseconds of GPU time from start's last record() to this one's; both
  // must have completed. Resolution about 0.5 microseconds.
  float elapsed_ms(const Event& start) const;
  cudaEvent_t get() const { return event_; }

 private:
  int device_ = 0;
  cudaEvent_t event_ = nullptr;
};

}  // namespace encore::cuda

// The CUDA runtime's checking macros (src/backends/cuda/status.h).
#define ENCORE_RETURN_IF_CUDA_ERROR(expr, what) \
  ENCORE_RETURN_IF_LIBRARY_ERROR(cudaSuccess, ::encore::cuda::cuda_failure, expr, what)
#define ENCORE_CUDA_CHECK(expr, what) ENCORE_LIBRARY_CHECK(cudaSuccess, ::encore::cuda::cuda_failure, expr, what)
