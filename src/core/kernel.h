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
#pragma once

namespace encore {

// Runs a kernel on the bytes of its argument struct.
using KernelThunk = void (*)(const void* args);

template <typename Args>
struct Kernel {
  KernelThunk thunk = nullptr;   // null: the backend does not provide this kernel
  constexpr explicit operator bool() const { return thunk != nullptr; }
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

}  // namespace encore
