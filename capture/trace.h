// What the recorder learns from one eager step: every kernel with the
// buffers it touched, every temporary allocation with its lifetime.
//
// Buffer ids: a temporary is its allocation index (0, 1, ...) in the order
// the step allocated; persistent storages (anything that existed before the
// step) are not buffers and get id kPersistent.
//
//   const Trace& t = recorder.trace();           // capture/recorder.h
//   for (const KernelRecord& k : t.kernels) {
//     for (int32_t id : k.writes) if (id != kPersistent) use(t.allocs[id].nbytes);
//   }
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "src/core/phase.h"
#include "src/core/step_observer.h"

namespace encore::capture_internal {

inline constexpr int32_t kPersistent = -1;

// Where a pointer argument points: into operand `operand` (reads, then
// writes) at byte `offset` from its storage's start, or nowhere in them.
struct PointerTarget {
  static constexpr int32_t kNull = -1;    // a null pointer
  static constexpr int32_t kOther = -2;   // memory outside the launch's operands: compared by value
  // The address of an empty operand (0 bytes: a batch of 0): no data behind
  // it, so any empty operand's address matches any other's.
  static constexpr int32_t kEmpty = -3;
  int32_t operand = kNull;
  int64_t offset = 0;
  bool operator==(const PointerTarget&) const = default;
};

struct KernelRecord {
  const char* op;
  KernelThunk thunk;
  Device device;                        // the stream it was launched on
  std::vector<int32_t> reads, writes;   // temporary ids (kPersistent for others)
  Phase phase = Phase::kForward;        // forward / backward / optimizer when launched
  std::vector<int64_t> read_bytes, write_bytes;   // bytes of each storage in reads / writes
  // What capture/launch_match.h compares with the capture run's launch:
  std::vector<unsigned char> args;      // the argument bytes
  std::vector<ArgField> fields;         // what they are (src/core/kernel_args.h)
  std::vector<PointerTarget> targets;   // one per pointer field, in order
  std::vector<uint64_t> storage_ids;    // Storage::id() of each operand (reads, then writes)
};

struct AllocRecord {
  int64_t nbytes = 0;
  Device device;
  int64_t allocated_at = 0;   // number of kernels launched before the allocation
  int64_t first_use = -1;     // first kernel that read or wrote it
  int64_t last_use = -1;      // last kernel that read or wrote it
  bool freed = false;
  bool output = false;        // held by a step output: lives to the end
  Phase phase = Phase::kForward;   // the phase that allocated it (backward: a gradient appearing)
};

struct Trace {
  std::vector<KernelRecord> kernels;
  std::vector<AllocRecord> allocs;
};

}  // namespace encore::capture_internal
