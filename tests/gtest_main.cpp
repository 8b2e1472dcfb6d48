// The main() of every test binary that links test_util: GoogleTest's, except
// that a run whose every case skipped (CUDA tests without a GPU) exits 77,
// which meson test reports as SKIP instead of OK. A binary where only some
// cases skipped exits 0, and gtest's summary lists the skipped cases.
#include <gtest/gtest.h>

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  const int result = RUN_ALL_TESTS();
  const ::testing::UnitTest& u = *::testing::UnitTest::GetInstance();
  constexpr int kSkipped = 77;   // the GNU / meson "skipped" exit status
  if (result == 0 && u.test_to_run_count() > 0 && u.skipped_test_count() == u.test_to_run_count()) return kSkipped;
  return result;
}
