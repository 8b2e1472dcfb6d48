// src/core/kernel_args.h: what fields() reports, and the check that catches
// a fields() that leaves a member out (NOTE [ Complete argument fields ]).
#include "src/core/kernel_args.h"

#include <cstring>

#include "encore/error.h"
#include "gtest/gtest.h"

namespace encore {
namespace {

enum class Mode : int8_t { kA = -2, kB = 3 };

struct Inner {
  int32_t count;
  int64_t sizes[4];
  template <typename V>
  void fields(V& v) const { v("count", count); v("sizes", sizes, count); }
};

struct Sample {
  float* x;
  Inner inner;
  Mode mode;
  bool flag;
  double scale;
  uint64_t value_bits;
  template <typename V>
  void fields(V& v) const {
    v("x", x); v("inner", inner); v("mode", mode); v("flag", flag); v("scale", scale);
    v.bits("value", value_bits, kFloat16);
  }
};

TEST(KernelArgsTest, FieldsGiveKindOffsetSizeAndOnlyTheSetPrefixOfArrays) {
  Sample s;
  std::memset(&s, 0xab, sizeof s);   // garbage in the unset tail of sizes and in the padding
  float f = 0;
  s.x = &f;
  s.inner.count = 2;
  s.inner.sizes[0] = 7;
  s.inner.sizes[1] = -9;
  s.mode = Mode::kA;
  s.flag = true;
  s.scale = 0.25;
  s.value_bits = 0x3e00;   // f16 1.5
  std::vector<ArgField> f_out;
  collect_arg_fields(s, f_out);
  ASSERT_EQ(f_out.size(), 8u);   // x, count, sizes[0], sizes[1], mode, flag, scale, value
  EXPECT_STREQ(f_out[0].name, "x");
  EXPECT_EQ(f_out[0].kind, ArgKind::kPointer);
  EXPECT_EQ(f_out[0].offset, offsetof(Sample, x));
  EXPECT_EQ(f_out[1].kind, ArgKind::kInteger);
  EXPECT_EQ(f_out[1].offset, offsetof(Sample, inner) + offsetof(Inner, count));
  EXPECT_EQ(f_out[3].index, 1);
  EXPECT_EQ(arg_value_string(f_out[3], &s), "-9");
  EXPECT_EQ(f_out[4].kind, ArgKind::kEnum);
  EXPECT_EQ(arg_value_string(f_out[4], &s), "-2");
  EXPECT_EQ(arg_value_string(f_out[5], &s), "true");
  EXPECT_EQ(f_out[6].kind, ArgKind::kFloat);
  EXPECT_EQ(arg_value_string(f_out[6], &s), "0.25");
  EXPECT_EQ(f_out[7].kind, ArgKind::kBits);
  EXPECT_EQ(arg_value_string(f_out[7], &s), "f16 1.5");
  EXPECT_EQ(arg_value_string(f_out[0], &s), "pointer");
}

struct MissesAMiddleMember {
  int32_t a;
  int32_t b;
  double c;
  template <typename V>
  void fields(V& v) const { v("a", a); v("c", c); }
};

struct MissesTheLastMember {
  double a;
  double b;
  template <typename V>
  void fields(V& v) const { v("a", a); }
};

struct MissesAMemberOfANestedStruct {
  Inner inner;   // complete
  struct Broken {
    int64_t p, q;
    template <typename V>
    void fields(V& v) const { v("q", q); }
  } broken;
  template <typename V>
  void fields(V& v) const { v("inner", inner); v("broken", broken); }
};

struct ListsOutOfOrder {
  int32_t a;
  int32_t b;
  template <typename V>
  void fields(V& v) const { v("b", b); v("a", a); }
};

TEST(KernelArgsTest, AFieldsListThatLeavesOutAMemberIsAnInternalError) {
  std::vector<ArgField> out;
  try {
    collect_arg_fields(MissesAMiddleMember{}, out);
    FAIL() << "a missing middle member passed";
  } catch (const Error& e) {
    EXPECT_EQ(e.status().code(), absl::StatusCode::kInternal);
    EXPECT_NE(e.status().message().find("it lists 2 of the struct's 3 initializers"), absl::string_view::npos)
        << e.status();
  }
  EXPECT_THROW(collect_arg_fields(MissesTheLastMember{}, out), Error);
  EXPECT_THROW(collect_arg_fields(MissesAMemberOfANestedStruct{}, out), Error);
  EXPECT_THROW(collect_arg_fields(ListsOutOfOrder{}, out), Error);
  EXPECT_NO_THROW(collect_arg_fields(Sample{}, out));
}

}  // namespace
}  // namespace encore
