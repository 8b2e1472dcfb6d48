// The training-step phase a kernel launch belongs to: forward (the default),
// backward (inside the autograd engine's backward()) or optimizer (inside
// Optimizer::step() and zero_grad()). A thread-local marker, set by RAII
// scopes, read by observers (capture's recorder stores it per launch, so a
// profiler can attribute every graph node to its phase). Eager launches never
// read it, so it costs them nothing.
//
//   void Optimizer::zero_grad() {
//     PhaseScope phase(Phase::kOptimizer);   // kernels launched below are "optimizer"
//     ...
//   }
//   Phase p = current_phase();               // e.g. in StepObserver::on_launch
#pragma once

#include <cstdint>

namespace encore {

enum class Phase : uint8_t { kForward, kBackward, kOptimizer };

inline const char* phase_name(Phase p) {
  switch (p) {
    case Phase::kBackward: return "backward";
    case Phase::kOptimizer: return "optimizer";
    case Phase::kForward: break;
  }
  return "forward";
}

namespace phase_internal {
inline thread_local Phase current = Phase::kForward;
}  // namespace phase_internal

inline Phase current_phase() { return phase_internal::current; }

// Sets this thread's phase for a scope and restores the previous one on exit
// (scopes nest: a backward() called inside an optimizer scope is backward).
class PhaseScope {
 public:
  explicit PhaseScope(Phase p) : prev_(phase_internal::current) { phase_internal::current = p; }
  ~PhaseScope() { phase_internal::current = prev_; }
  PhaseScope(const PhaseScope&) = delete;
  PhaseScope& operator=(const PhaseScope&) = delete;

 private:
  Phase prev_;
};

}  // namespace encore
