// Observers of a whole backward pass, for what must happen once per
// backward() rather than per node: DistributedDataParallel
// (src/dist/ddp.cpp) starts each synchronized backward from a clean bucket
// state and checks at its end that every parameter took part.
//
//   int64_t id = autograd::add_backward_observer([](autograd::BackwardEvent e) { ... });
//   loss.backward();                              // kBegin, the nodes, then kEnd (or kAbort)
//   autograd::remove_backward_observer(id);
//
// NOTE [ Backward observers ]: every observer sees each outermost
// autograd::backward() of any thread, on that thread (a backward started
// inside another, from a hook, is part of the outer one and is not
// reported). kBegin comes before the roots are checked and anything runs;
// kEnd after the last node ran; kAbort when the backward throws (from a
// node, a hook or a kBegin observer), just before the exception leaves
// backward(). An observer may throw from kBegin or kEnd, and backward()
// then throws that error (after every observer has seen the event); what
// it throws from kAbort is dropped, since an error is already on its way.
// Observers are called in the order they were added, from a copy of the
// list taken at kBegin: remove one only when no backward is running.
#pragma once

#include <cstdint>
#include <functional>

namespace encore::autograd {

enum class BackwardEvent : uint8_t { kBegin, kEnd, kAbort };
using BackwardObserver = std::function<void(BackwardEvent)>;

// Returns an id for remove_backward_observer.
int64_t add_backward_observer(BackwardObserver observer);
// No effect when the id was removed already.
void remove_backward_observer(int64_t id);

}  // namespace encore::autograd
