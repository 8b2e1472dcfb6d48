// What a kernel is to encore's one launch path: a function of one trivially
// copyable argument struct (pointers, sizes, scalars), type-erased to a
// KernelThunk so that Stream, the recorder and the CPU graph can store it
// with a copy of its argument bytes. nvcc-safe: no Abseil, no tensor types,
// so a .cu file can name its launchers as Kernels.
//
//   struct ScaleArgs { float* x; int64_t n; float s; };
//   void scale_kernel(const ScaleArgs& a) { for (int64_t i = 0; i < a.n; ++i) a.x[i] *= a.s; }
//   constexpr Kernel<ScaleArgs> kScale = kernel<&scale_kernel>();
//   current_stream(kCPU).launch(kScale, "scale", ScaleArgs{p, n, 2.f}, {}, {storage});
//
// A Kernel<Args> can only be made from a function taking `const Args&`, and
// Stream::launch only accepts the Args it was made for: the type erasure is
// checked where the kernel is named, once.
//
// NOTE [ Specialized kernels ]: a backend entry that serves many dtypes and
// modes (BinaryArgs: every dtype, four ops) can be made from a *specializer*
// instead, `KernelThunk pick(const Args&)`, which returns the thunk of the
// loop compiled for exactly those arguments. Stream::launch asks it once per
// launch, so the recorder, the CPU graph and every replay hold the
// specialized thunk and never dispatch again (a replayed node is one
// indirect call, as cheap as a kernel named at compile time).
//
//   template <typename T, BinaryOp kOp> void binary_loop(const BinaryArgs& a);
//   KernelThunk pick_binary(const BinaryArgs& a) { ... return thunk_of<&binary_loop<float, BinaryOp::kAdd>>(); }
//   constexpr Kernel<BinaryArgs> kBinary = specialized_kernel<&pick_binary>();
#pragma once

namespace encore {

// Runs a kernel on the bytes of its argument struct.
using KernelThunk = void (*)(const void* args);

template <typename Args>
struct Kernel {
  KernelThunk thunk = nullptr;   // runs any Args; null: the backend does not provide this kernel
  // (optional) NOTE [ Specialized kernels ]: the thunk for these arguments.
  KernelThunk (*specialize)(const Args& args) = nullptr;
  constexpr explicit operator bool() const { return thunk != nullptr; }
  // The thunk a launch of `args` records and runs.
  KernelThunk thunk_for(const Args& args) const { return specialize != nullptr ? specialize(args) : thunk; }
};

namespace kernel_internal {
template <auto Fn>
struct Traits;
template <typename Args, void (*Fn)(const Args&)>
struct Traits<Fn> {
  using ArgsType = Args;
  static void thunk(const void* args) { Fn(*static_cast<const Args*>(args)); }
};
}  // namespace kernel_internal

// The Kernel of `void Fn(const Args&)`.
template <auto Fn>
constexpr Kernel<typename kernel_internal::Traits<Fn>::ArgsType> kernel() {
  return {&kernel_internal::Traits<Fn>::thunk};
}

// The thunk of `void Fn(const Args&)`, for specializers.
template <auto Fn>
constexpr KernelThunk thunk_of() {
  return &kernel_internal::Traits<Fn>::thunk;
}

namespace kernel_internal {
template <auto Pick>
struct Specializer;
template <typename Args, KernelThunk (*Pick)(const Args&)>
struct Specializer<Pick> {
  using ArgsType = Args;
  static void thunk(const void* args) { Pick(*static_cast<const Args*>(args))(args); }
};
}  // namespace kernel_internal

// The Kernel of a specializer `KernelThunk Pick(const Args&)` (NOTE [ Specialized kernels ]).
template <auto Pick>
constexpr Kernel<typename kernel_internal::Specializer<Pick>::ArgsType> specialized_kernel() {
  return {&kernel_internal::Specializer<Pick>::thunk, Pick};
}

}  // namespace encore
