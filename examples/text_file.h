// Reading an example's input file whole, as hostile input: a text file or a
// gzip of one (zlib reads both), at most kMaxInputBytes once decompressed
// (/dev/zero or a huge file is refused, not read until memory runs out), and
// a gzip that ends early (a truncated download) is refused, not read as the
// shorter text it holds.
//
//   absl::StatusOr<std::string> text = examples::read_text_file(path);
//   if (!text.ok()) return text.status();   // NotFound, or InvalidArgument naming the path
#pragma once

#include <zlib.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <system_error>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"

namespace encore::examples {

inline constexpr int64_t kMaxInputBytes = int64_t{64} << 20;   // decompressed

inline absl::StatusOr<std::string> read_text_file(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    return absl::InvalidArgumentError(absl::StrCat(path, " is a directory, not a text file"));
  }
  gzFile f = gzopen(path.c_str(), "rb");
  if (f == nullptr) return absl::NotFoundError(absl::StrCat("cannot open ", path));
  std::string text;
  char buf[1 << 16];
  int got = 0;
  while ((got = gzread(f, buf, sizeof buf)) > 0 && static_cast<int64_t>(text.size()) <= kMaxInputBytes) {
    text.append(buf, static_cast<size_t>(got));
  }
  int err = Z_OK;
  const char* message = gzerror(f, &err);
  const std::string why = message != nullptr ? message : "";
  gzclose(f);
  if (static_cast<int64_t>(text.size()) > kMaxInputBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, " holds more than ", kMaxInputBytes >> 20, " MiB of text, more than an example reads"));
  }
  // zlib reports a stream that ends early as Z_BUF_ERROR once gzread has returned what there was.
  if (err == Z_BUF_ERROR) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": truncated gzip (the stream ends before its last block)"));
  }
  if (got < 0 || err != Z_OK) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": not a readable gzip or text file (", why, ")"));
  }
  return text;
}

}  // namespace encore::examples
