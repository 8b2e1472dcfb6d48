// Every argument struct of the kernel table lists all its members in
// fields() (NOTE [ Complete argument fields ] in src/core/kernel_args.h), so
// capture() compares every host value of every launch.
#include <vector>

#include "gtest/gtest.h"
#include "src/backends/kernel_table.h"
#include "src/core/kernel_args.h"

namespace encore {
namespace {

template <typename... Args>
void expect_complete() {
  (
      [] {
        std::vector<ArgField> out;
        EXPECT_NO_THROW(collect_arg_fields(Args{}, out)) << typeid(Args).name();
        EXPECT_FALSE(out.empty()) << typeid(Args).name();
      }(),
      ...);
}

TEST(KernelTableArgsTest, EveryArgumentStructListsEveryMember) {
  expect_complete<backend::BinaryArgs, backend::BinaryScalarArgs, backend::UnaryArgs, backend::UnaryBackwardArgs,
                  backend::WhereArgs, backend::MaskedFillArgs, backend::FillArgs, backend::CopyArgs,
                  backend::ArangeArgs, backend::RandomArgs, backend::SumArgs, backend::MaxArgs,
                  backend::MaxBackwardArgs, backend::SoftmaxArgs, backend::SoftmaxBackwardArgs,
                  backend::CrossEntropyArgs, backend::CrossEntropyBackwardArgs, backend::LayerNormArgs,
                  backend::LayerNormBackwardArgs, backend::EmbeddingArgs, backend::EmbeddingBackwardArgs,
                  backend::DropoutArgs, backend::DropoutBackwardArgs, backend::GemmArgs, backend::ColumnSumArgs,
                  backend::SgdArgs, backend::AdamWArgs, backend::AdamWManyArgs, backend::IncrementArgs,
                  backend::SumSquaresArgs, backend::ClipCoefArgs, backend::ScaleInPlaceArgs, backend::CompareArgs,
                  backend::CompareScalarArgs, backend::BceLogitsArgs, backend::NllArgs, backend::NllBackwardArgs,
                  backend::GatherArgs, backend::ScatterAddArgs, backend::TopkArgs, backend::MultinomialArgs>();
  expect_complete<backend::ConvArgs, backend::MaxPoolArgs, backend::MaxPoolBackwardArgs, backend::AvgPoolArgs,
                  backend::BatchNormArgs, backend::BatchNormBackwardArgs>();
}

}  // namespace
}  // namespace encore
