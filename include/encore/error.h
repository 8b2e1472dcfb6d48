// encore::Error: the exception that ops throw on bad input, and the helpers
// that turn it back into an absl::Status at API boundaries.
//
// Ops used inside model code (a + b, matmul, ...) throw encore::Error so that
// they stay expressions; the error carries an absl::Status whose message names
// the op, the shapes and the dtypes. Boundary functions return Status instead.
//
//   try { encore::Tensor c = a + b; }
//   catch (const encore::Error& e) { e.status().code(); e.what(); }
//
//   absl::Status s = encore::status_of([&] { loss.backward(); });   // no throw
#pragma once

#include <exception>
#include <string>
#include <utility>

#if defined(__GLIBCXX__)   // set by the standard headers above
#include <cxxabi.h>     // abi::__forced_unwind
#endif

#include "absl/status/status.h"
#include "absl/strings/str_format.h"

namespace encore {

class Error : public std::exception {
 public:
  explicit Error(absl::Status status) : status_(std::move(status)), what_(status_.ToString()) {}
  const absl::Status& status() const { return status_; }
  const char* what() const noexcept override { return what_.c_str(); }

 private:
  absl::Status status_;
  std::string what_;
};

[[noreturn]] void throw_error(absl::StatusCode code, std::string message);

// Runs fn(); returns OK, or the Status of the encore::Error it threw (other
// std::exceptions, and anything else thrown, become kInternal). Lets no
// exception escape except thread-cancellation unwinding, which must go on.
template <typename F>
[[nodiscard]] absl::Status status_of(F&& fn) {
  try {
    std::forward<F>(fn)();
    return absl::OkStatus();
  } catch (const Error& e) {
    return e.status();
  } catch (const std::exception& e) {
    return absl::InternalError(e.what());
#if defined(__GLIBCXX__)
  } catch (abi::__forced_unwind&) {   // thread cancellation: must go on unwinding
    throw;
#endif
  } catch (...) {
    return absl::InternalError("an exception of a type not derived from std::exception");
  }
}

}  // namespace encore

// Throws encore::Error(kInvalidArgument) with a StrFormat message when cond is false.
#define ENCORE_CHECK(cond, ...)                                                             \
  do {                                                                                      \
    if (!(cond)) [[unlikely]]                                                               \
      ::encore::throw_error(absl::StatusCode::kInvalidArgument, absl::StrFormat(__VA_ARGS__)); \
  } while (0)

// Same, with an explicit absl::StatusCode.
#define ENCORE_CHECK_CODE(cond, code, ...)                                  \
  do {                                                                      \
    if (!(cond)) [[unlikely]]                                               \
      ::encore::throw_error(absl::StatusCode::code, absl::StrFormat(__VA_ARGS__)); \
  } while (0)
