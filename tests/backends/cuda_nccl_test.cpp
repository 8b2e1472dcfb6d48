// NCCL's members of the checking macro family (src/backends/cuda/nccl.h):
// every result code becomes the stated Status code with a message naming the
// call, and nothing aborts. Runs without a GPU: ncclGetErrorString and
// ncclGetVersion need no device.
#include <gtest/gtest.h>

#include <string>

#include "encore/error.h"
#include "src/backends/cuda/nccl.h"

namespace encore::cuda {
namespace {

TEST(NcclStatusTest, EveryResultMapsToItsCodeAndNamesTheCall) {
  const struct {
    ncclResult_t result;
    absl::StatusCode code;
  } cases[] = {
      {ncclUnhandledCudaError, absl::StatusCode::kInternal},
      {ncclSystemError, absl::StatusCode::kUnavailable},
      {ncclInternalError, absl::StatusCode::kInternal},
      {ncclInvalidArgument, absl::StatusCode::kInvalidArgument},
      {ncclInvalidUsage, absl::StatusCode::kFailedPrecondition},
      {ncclRemoteError, absl::StatusCode::kUnavailable},
      {ncclInProgress, absl::StatusCode::kUnavailable},
      {static_cast<ncclResult_t>(99), absl::StatusCode::kInternal},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(static_cast<int>(c.result));
    const absl::Status s = nccl_status(c.result, "all-reduce of gradients");
    EXPECT_EQ(s.code(), c.code) << s;
    const std::string msg(s.message());
    EXPECT_EQ(msg.rfind("all-reduce of gradients: NCCL error " + std::to_string(static_cast<int>(c.result)), 0), 0u)
        << msg;
    EXPECT_NE(msg.find(ncclGetErrorString(c.result)), std::string::npos) << msg;
  }
  EXPECT_TRUE(nccl_status(ncclSuccess, "anything").ok());
}

absl::Status returns_early(ncclResult_t result, bool* reached_end) {
  ENCORE_RETURN_IF_NCCL_ERROR(result, "ncclCommInitRank");
  *reached_end = true;
  return absl::OkStatus();
}

TEST(NcclStatusTest, ReturnMacroStopsAtAFailureOnly) {
  bool reached = false;
  const absl::Status s = returns_early(ncclInvalidUsage, &reached);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("ncclCommInitRank"), absl::string_view::npos) << s;
  EXPECT_FALSE(reached);
  EXPECT_TRUE(returns_early(ncclSuccess, &reached).ok());
  EXPECT_TRUE(reached);
}

TEST(NcclStatusTest, CheckMacroThrowsAnEncoreErrorWithTheCode) {
  EXPECT_NO_THROW(ENCORE_NCCL_CHECK(ncclSuccess, "ncclGroupEnd"));
  try {
    ENCORE_NCCL_CHECK(ncclInvalidArgument, "ncclAllReduce");
    ADD_FAILURE() << "no throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("ncclAllReduce: NCCL error 4"), std::string::npos) << e.what();
  }
}

TEST(NcclStatusTest, VersionOfTheLoadedLibraryMatchesTheHeadersMajorAndMinor) {
  absl::StatusOr<int> v = nccl_version();
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(*v / 10000, NCCL_MAJOR);
  EXPECT_EQ(*v / 100 % 100, NCCL_MINOR);
}

}  // namespace
}  // namespace encore::cuda
