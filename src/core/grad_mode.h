// Whether autograd records on this thread (encore::GradMode's state, NOTE
// [ Grad mode ] below), kept in core so that a captured graph can check it
// at replay without depending on autograd.
//
//   if (!grad_mode_internal::enabled) { /* inside a NoGradGuard */ }
//
// NOTE [ Grad mode ]: GradMode::is_enabled / set_enabled (encore/autograd.h,
// src/autograd/engine.cpp) read and write this flag; NoGradGuard sets it for
// a scope. A captured step that runs backward would fail eagerly inside a
// NoGradGuard (no graph to run backward through), so replay() refuses there
// (capture/graph.cpp).
#pragma once

namespace encore::grad_mode_internal {
inline thread_local bool enabled = true;
}  // namespace encore::grad_mode_internal
