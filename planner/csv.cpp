// CSV in MiniMalloc's format: id,lower,upper,size[,alignment][,offset], and
// the older benchmarks' names of the first three columns.
#include <array>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "encore/planner.h"
#include "planner/internal.h"

namespace encore::planner {
namespace {

enum Column { kId, kLower, kUpper, kSize, kAlignment, kOffset, kNumColumns };
constexpr std::array<absl::string_view, kNumColumns> kColumnNames = {"id",        "lower", "upper",
                                                                     "size", "alignment", "offset"};
constexpr std::array<bool, kNumColumns> kRequired = {true, true, true, true, false, false};

absl::Status line_error(int line, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("line ", line, ": ", what));
}

// Where each known column sits in a row; -1 when absent.
using ColumnIndex = std::array<int, kNumColumns>;

// NOTE [ Older MiniMalloc columns ]: MiniMalloc's reader (src/converter.cc)
// also takes the names of its older benchmark files: buffer or buffer_id for
// id, start or begin for lower, and end for upper. An `end` is inclusive
// (MiniMalloc adds 1 to it), so a buffer read from it has upper = end + 1.
struct ColumnAlias {
  absl::string_view name;
  Column column;
};
constexpr std::array<ColumnAlias, 5> kAliases = {{{"buffer", kId},
                                                  {"buffer_id", kId},
                                                  {"start", kLower},
                                                  {"begin", kLower},
                                                  {"end", kUpper}}};

// *end_inclusive: upper came from an `end` column.
absl::StatusOr<ColumnIndex> parse_header(absl::string_view header, int line, bool* end_inclusive) {
  ColumnIndex index;
  index.fill(-1);
  *end_inclusive = false;
  int position = 0;
  for (absl::string_view name : absl::StrSplit(header, ',')) {
    name = absl::StripAsciiWhitespace(name);
    int column = 0;
    while (column < kNumColumns && kColumnNames[column] != name) ++column;
    for (const ColumnAlias& alias : kAliases) {
      if (column == kNumColumns && alias.name == name) {
        column = alias.column;
        *end_inclusive = *end_inclusive || name == "end";
      }
    }
    // Quoted as in C: a terminal acts on control bytes, and a NUL would end the message.
    if (column == kNumColumns) return line_error(line, absl::StrCat("unknown column '", absl::CHexEscape(name), "'"));
    if (index[column] != -1) {
      return line_error(line, absl::StrCat("column '", name, "' appears twice (as '", kColumnNames[column], "')"));
    }
    index[column] = position++;
  }
  for (int column = 0; column < kNumColumns; ++column) {
    if (kRequired[column] && index[column] == -1) {
      return line_error(line, absl::StrCat("missing column '", kColumnNames[column], "'"));
    }
  }
  return index;
}

absl::StatusOr<int64_t> parse_int(absl::string_view field, Column column, int line) {
  int64_t value = 0;
  if (!absl::SimpleAtoi(field, &value)) {
    return line_error(line, absl::StrCat("column '", kColumnNames[column], "': '", absl::CHexEscape(field),
                                         "' is not an integer"));
  }
  return value;
}

// Checks one buffer's invariants; the message says which buffer and why.
absl::Status check_row(const Buffer& b, int64_t offset, bool has_offset, int line) {
  std::string problem = internal::buffer_problem(b);
  if (problem.empty() && has_offset && offset < 0) problem = absl::StrCat("negative offset ", offset);
  // Whoever reads the plan computes offset + size (the peak, validate()).
  if (problem.empty() && has_offset && offset > std::numeric_limits<int64_t>::max() - b.size) {
    problem = absl::StrCat("offset ", offset, " + size ", b.size, " does not fit in int64");
  }
  if (problem.empty()) return absl::OkStatus();
  return line_error(line, absl::StrCat("buffer '", b.id, "': ", problem));
}

absl::Status parse_row(absl::string_view text, const ColumnIndex& index, bool end_inclusive, int line,
                       CsvProblem* out) {
  std::vector<absl::string_view> fields = absl::StrSplit(text, ',');
  int expected = 0;
  for (int position : index) expected += position != -1;
  if (static_cast<int>(fields.size()) != expected) {
    return line_error(line, absl::StrCat("expected ", expected, " fields, found ", fields.size()));
  }
  for (absl::string_view& field : fields) field = absl::StripAsciiWhitespace(field);
  Buffer b;
  b.id = std::string(fields[index[kId]]);
  if (b.id.empty()) return line_error(line, "empty id");
  for (const char c : b.id) {   // the SVG (XML) cannot hold them, and a terminal acts on them
    if (absl::ascii_iscntrl(c)) {
      return line_error(line, absl::StrCat("id '", absl::CHexEscape(b.id), "' holds the control byte 0x",
                                           absl::Hex(static_cast<unsigned char>(c), absl::kZeroPad2)));
    }
  }
  std::array<int64_t*, kNumColumns> targets = {nullptr, &b.lower, &b.upper, &b.size, &b.alignment, nullptr};
  int64_t offset = 0;
  targets[kOffset] = &offset;
  for (int column = kLower; column < kNumColumns; ++column) {
    if (index[column] == -1) continue;
    absl::StatusOr<int64_t> value = parse_int(fields[index[column]], static_cast<Column>(column), line);
    if (!value.ok()) return value.status();
    *targets[column] = *value;
  }
  if (end_inclusive) {   // NOTE [ Older MiniMalloc columns ]
    if (b.upper == std::numeric_limits<int64_t>::max()) {
      return line_error(line, absl::StrCat("buffer '", b.id, "': end ", b.upper, " + 1 does not fit in int64"));
    }
    ++b.upper;
  }
  if (absl::Status status = check_row(b, offset, index[kOffset] != -1, line); !status.ok()) return status;
  out->buffers.push_back(std::move(b));
  if (index[kOffset] != -1) out->offsets.push_back(offset);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<CsvProblem> parse_csv(absl::string_view text) {
  CsvProblem problem;
  ColumnIndex index;
  index.fill(-1);
  bool end_inclusive = false;
  bool have_header = false;
  absl::flat_hash_map<std::string, int> first_line;  // id -> line it first appeared on
  int line = 0;
  absl::ConsumePrefix(&text, "\xEF\xBB\xBF");   // a UTF-8 byte order mark, as some editors write
  for (absl::string_view row : absl::StrSplit(text, '\n')) {
    ++line;
    row = absl::StripAsciiWhitespace(row);
    if (row.empty()) continue;
    if (!have_header) {
      absl::StatusOr<ColumnIndex> header = parse_header(row, line, &end_inclusive);
      if (!header.ok()) return header.status();
      index = *header;
      have_header = true;
      problem.has_alignment = index[kAlignment] != -1;
      continue;
    }
    if (absl::Status status = parse_row(row, index, end_inclusive, line, &problem); !status.ok()) return status;
    auto [it, inserted] = first_line.emplace(problem.buffers.back().id, line);
    if (!inserted) {
      return line_error(line, absl::StrCat("duplicate id '", it->first, "' (first on line ", it->second, ")"));
    }
  }
  if (!have_header) return line_error(1, "missing header (expected id,lower,upper,size)");
  return problem;
}

// NOTE [ Reading a CSV file ]
// The file is read whole and parsed from memory. A directory opens as a
// file on Linux and reads as nothing, which parsed as "line 1: missing
// header"; it is named as a directory instead. Files past kMaxCsvBytes are
// refused before they are read (by their size) or as soon as the read passes
// it (a pipe), so a hostile or mistaken path (/dev/zero, a disk image) ends
// with a message, not with memory exhausted. 1 GiB is 30 times a problem of
// 10^6 buffers, and keeps the line counter far from the limit of an int.
constexpr int64_t kMaxCsvBytes = int64_t{1} << 30;

absl::StatusOr<CsvProblem> read_csv(const std::string& path) {
  auto too_large = [&path] {
    return absl::ResourceExhaustedError(
        absl::StrCat(path, ": larger than ", kMaxCsvBytes, " bytes (1 GiB), the most a CSV problem may hold"));
  };
  std::error_code error;
  const std::filesystem::file_status status = std::filesystem::status(path, error);
  if (std::filesystem::is_directory(status)) {
    return absl::InvalidArgumentError(absl::StrCat("'", path, "' is a directory, not a CSV file"));
  }
  if (std::filesystem::is_regular_file(status)) {
    const uintmax_t size = std::filesystem::file_size(path, error);
    if (!error && size > static_cast<uintmax_t>(kMaxCsvBytes)) return too_large();
  }
  errno = 0;
  std::ifstream file(path, std::ios::binary);
  if (!file) {
    return absl::NotFoundError(
        absl::StrCat("cannot open '", path, "'", errno != 0 ? absl::StrCat(": ", std::strerror(errno)) : ""));
  }
  std::string contents;
  std::vector<char> chunk(size_t{1} << 16);
  while (file) {
    file.read(chunk.data(), static_cast<std::streamsize>(chunk.size()));
    if (static_cast<int64_t>(contents.size()) + file.gcount() > kMaxCsvBytes) return too_large();
    contents.append(chunk.data(), static_cast<size_t>(file.gcount()));
  }
  if (file.bad()) return absl::DataLossError(absl::StrCat("error while reading '", path, "'"));
  absl::StatusOr<CsvProblem> problem = parse_csv(contents);
  if (!problem.ok()) {
    return absl::Status(problem.status().code(), absl::StrCat(path, ": ", problem.status().message()));
  }
  return problem;
}

std::string format_csv(absl::Span<const Buffer> buffers, const Plan* plan, bool with_alignment) {
  std::string out = "id,lower,upper,size";
  if (with_alignment) out += ",alignment";
  if (plan != nullptr) out += ",offset";
  out += "\n";
  for (size_t i = 0; i < buffers.size(); ++i) {
    const Buffer& b = buffers[i];
    absl::StrAppend(&out, b.id, ",", b.lower, ",", b.upper, ",", b.size);
    if (with_alignment) absl::StrAppend(&out, ",", b.alignment);
    if (plan != nullptr) absl::StrAppend(&out, ",", plan->offsets[i]);
    out += "\n";
  }
  return out;
}

// The messages end with the cause errno gives ("No such file or directory",
// "No space left on device"), or EIO's when a stream failed without one.
absl::Status write_file(const std::string& path, absl::string_view contents) {
  auto cause = [] { return std::strerror(errno != 0 ? errno : EIO); };
  errno = 0;
  std::ofstream file(path, std::ios::binary | std::ios::trunc);
  if (!file) return absl::PermissionDeniedError(absl::StrCat("cannot write '", path, "': ", cause()));
  errno = 0;   // so a failed write names its own cause
  file.write(contents.data(), static_cast<std::streamsize>(contents.size()));
  file.close();   // a full disk shows at the last flush
  if (!file) return absl::DataLossError(absl::StrCat("error while writing '", path, "': ", cause()));
  return absl::OkStatus();
}

}  // namespace encore::planner
