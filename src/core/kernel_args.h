// The fields of a kernel's argument struct, as step observers see them:
// which bytes are pointers (they move between runs: temporaries live in the
// arena during capture) and which are host values baked into the launch
// (scalars, sizes, modes), so that capture() can compare every value of the
// capture run with the recorded warm-up and a Graph can list what it froze.
//
// Every argument struct launched through Stream declares its fields, in
// order, with a fields() member template:
//
//   struct ScaleArgs {
//     float* x;
//     int64_t n;
//     float s;
//     template <typename V> void fields(V& v) const { v("x", x); v("n", n); v("s", s); }
//   };
//
//   std::vector<ArgField> out;
//   collect_arg_fields(args, out);   // x: kPointer at 0, n: kInteger at 8, s: kFloat at 16
//
// What v(...) takes: a pointer, an integer, a float, a bool or an enum; a
// nested struct with its own fields(); a C array (every element); the first
// `count` elements of an array, v("shape", shape, count), where the entries
// past `count` are not set; and v.bits("value", bits, dtype) for integer bits
// that hold a value of `dtype` (a fill value in its storage bytes). Padding
// and unset array tails are never compared. NOTE [ Complete argument fields ]
// below: a struct whose fields() leaves a member out is an internal error at
// its first observed launch, so a forgotten field cannot go unchecked.
//
// Host code only (observers, capture/): kernel_table.h's structs only call v.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>
#include <typeinfo>
#include <utility>
#include <vector>

#include "encore/dtype.h"

namespace encore {

enum class ArgKind : uint8_t {
  kPointer,   // relocated between runs: compared by the operand it points into
  kInteger,   // sizes, strides, counts, device indices
  kFloat,     // a host number: alpha, eps, p, a scale
  kBool,      // a mode flag
  kEnum,      // a dtype, an op, a mode
  kBits,      // integer bits holding a value of bits_dtype (a fill value)
};

struct ArgField {
  const char* name;          // static string: the member's name
  int32_t index = -1;        // the element of an array member; -1 for a plain member
  uint32_t offset = 0;       // bytes from the start of the struct
  uint8_t size = 0;          // bytes
  ArgKind kind = ArgKind::kInteger;
  bool is_signed = false;    // kInteger, kEnum
  DType bits_dtype = kFloat32;   // kBits
};

// The value of field `f` of the argument bytes `args`, for messages:
// "0.5", "-3", "true", "float32 1.5" (kBits), "pointer".
std::string arg_value_string(const ArgField& f, const void* args);   // src/core/kernel_args.cpp

namespace kernel_args_internal {

template <typename T>
concept HasFields = requires(const T& t, int& v) { t.fields(v); };

template <typename T>
constexpr ArgKind kind_of() {
  if constexpr (std::is_pointer_v<T>) return ArgKind::kPointer;
  else if constexpr (std::is_same_v<T, bool>) return ArgKind::kBool;
  else if constexpr (std::is_enum_v<T>) return ArgKind::kEnum;
  else if constexpr (std::is_floating_point_v<T>) return ArgKind::kFloat;
  else return ArgKind::kInteger;
}

template <typename T>
constexpr bool is_signed_value() {
  if constexpr (std::is_enum_v<T>) return std::is_signed_v<std::underlying_type_t<T>>;
  else return std::is_signed_v<T>;
}

// Appends one ArgField per visited scalar (array elements one by one).
class Collector {
 public:
  Collector(const void* base, std::vector<ArgField>& out) : base_(static_cast<const char*>(base)), out_(out) {}

  template <typename T>
  void operator()(const char* name, const T& member) {
    if constexpr (std::is_array_v<T>) {
      (*this)(name, member, static_cast<int64_t>(std::extent_v<T>));
    } else if constexpr (HasFields<T>) {
      member.fields(*this);
    } else {
      add(name, -1, member, kind_of<T>());
    }
  }
  template <typename T, size_t N>
  void operator()(const char* name, const T (&array)[N], int64_t count) {
    for (int64_t i = 0; i < count && i < static_cast<int64_t>(N); ++i) {
      if constexpr (std::is_array_v<T> || HasFields<T>) {
        (*this)(name, array[i]);
      } else {
        add(name, static_cast<int32_t>(i), array[i], kind_of<T>());
      }
    }
  }
  template <typename T>
  void bits(const char* name, const T& member, DType dtype) {
    static_assert(std::is_integral_v<T>, "bits() takes integer storage bytes");
    add(name, -1, member, ArgKind::kBits);
    out_.back().bits_dtype = dtype;
  }

 private:
  template <typename T>
  void add(const char* name, int32_t index, const T& member, ArgKind kind) {
    static_assert(std::is_trivially_copyable_v<T> && sizeof(T) <= 8, "an argument field is one scalar");
    ArgField f{name, index, static_cast<uint32_t>(reinterpret_cast<const char*>(&member) - base_),
               static_cast<uint8_t>(sizeof(T)), kind, is_signed_value<T>(), kFloat32};
    out_.push_back(f);
  }
  const char* base_;
  std::vector<ArgField>& out_;
};

// NOTE [ Complete argument fields ]: fields() lists members by hand, so the
// first observed launch of each argument type checks that it lists all of
// them, in order, once each. Two counts must agree: the number of
// initializers the struct takes in aggregate initialization (each array
// element one, by brace elision; a nested struct one), found by trying
// T{any, any, ...} at compile time; and the same count over what fields()
// visits (whole arrays, even those visited by prefix). And every member
// visited must start where C++'s layout rule puts the member after the
// previous one (the first offset its alignment allows), the last one ending
// where rounding up to the struct's alignment gives sizeof. A member left
// out, listed twice or out of order fails one of the two.
struct AnyValue {
  template <typename T>
  operator T() const;   // never defined: only asked in unevaluated contexts
};

template <typename T, size_t... I>
constexpr bool takes_initializers(std::index_sequence<I...>) {
  return requires { T{(static_cast<void>(I), AnyValue{})...}; };
}

// The most initializers T{...} takes (at most 256).
template <typename T, size_t N = 0>
constexpr size_t aggregate_initializers() {
  if constexpr (N > 256 || !takes_initializers<T>(std::make_index_sequence<N + 1>{})) {
    return N;
  } else {
    return aggregate_initializers<T, N + 1>();
  }
}

class Coverage {
 public:
  explicit Coverage(const void* base) : base_(static_cast<const char*>(base)) {}

  template <typename T>
  void operator()(const char* name, const T& member) {
    if constexpr (HasFields<T>) {
      Coverage inner(&member);
      member.fields(inner);
      if (!inner.finish<T>()) fail(std::string("in '") + name + "': " + inner.why_);
      initializers_ += 1;
    } else if constexpr (std::is_array_v<T>) {
      initializers_ += sizeof(T) / sizeof(std::remove_all_extents_t<T>);
    } else {
      initializers_ += 1;
    }
    place(name, &member, sizeof(T), alignof(T));
  }
  template <typename T, size_t N>
  void operator()(const char* name, const T (&array)[N], int64_t count) {
    (*this)(name, array);
  }
  template <typename T>
  void bits(const char* name, const T& member, DType dtype) {
    (*this)(name, member);
  }

  // Whether the visited members are all of T's, in order (the note above).
  template <typename T>
  bool finish() {
    constexpr size_t kInitializers = aggregate_initializers<T>();
    if (why_.empty() && initializers_ != kInitializers) {
      why_ = "it lists " + std::to_string(initializers_) + " of the struct's " + std::to_string(kInitializers) +
             " initializers (array elements counted one by one)";
    }
    if (why_.empty() && round_up(end_, alignof(T)) != sizeof(T)) {
      why_ = "members end at byte " + std::to_string(end_) + " of " + std::to_string(sizeof(T));
    }
    return why_.empty();
  }
  const std::string& why() const { return why_; }

 private:
  static size_t round_up(size_t n, size_t a) { return (n + a - 1) / a * a; }
  void place(const char* name, const void* member, size_t size, size_t align) {
    const size_t offset = static_cast<size_t>(static_cast<const char*>(member) - base_);
    if (why_.empty() && offset != round_up(end_, align)) {
      fail(std::string("member '") + name + "' is at byte " + std::to_string(offset) + ", expected " +
           std::to_string(round_up(end_, align)) + ": fields() leaves out the member before it or lists it out "
           "of order");
    }
    end_ = offset + size;
  }
  void fail(const std::string& why) {
    if (why_.empty()) why_ = why;
  }
  const char* base_;
  size_t end_ = 0;
  size_t initializers_ = 0;
  std::string why_;
};

[[noreturn]] void incomplete_fields(const char* type, const std::string& why);   // src/core/kernel_args.cpp

template <typename Args>
bool check_complete(const Args& args) {
  Coverage c(&args);
  args.fields(c);
  if (!c.finish<Args>()) incomplete_fields(typeid(Args).name(), c.why());
  return true;
}

}  // namespace kernel_args_internal

// Appends the fields of `args` to `out`, in declaration order. The first
// call for each Args type checks NOTE [ Complete argument fields ] (an
// internal encore::Error when fields() misses a member).
template <typename Args>
void collect_arg_fields(const Args& args, std::vector<ArgField>& out) {
  static_assert(kernel_args_internal::HasFields<Args>,
                "a kernel argument struct declares its fields: template <typename V> void fields(V& v) const");
  [[maybe_unused]] static const bool complete = kernel_args_internal::check_complete(args);
  kernel_args_internal::Collector c(&args, out);
  args.fields(c);
}

// collect_arg_fields for type-erased argument bytes of an Args
// (LaunchRecord::collect_fields).
template <typename Args>
void collect_arg_fields_of(const void* args, std::vector<ArgField>& out) {
  collect_arg_fields(*static_cast<const Args*>(args), out);
}

}  // namespace encore
