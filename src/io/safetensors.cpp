// Safetensors checkpoints: see include/encore/checkpoint.h for the format, the
// API and the error table. Sections: format tables, errors and files, header
// parsing and validation, loading, saving.
//
// NOTE [ Hostile files ]: a checkpoint may come from anywhere, so loading
// trusts no number in it. The header length is checked against the file and a
// 100 MB cap before anything is allocated; every entry is checked for types,
// dtype, shape and offsets; the offsets of all entries together must tile the
// data section exactly (see check_layout); only then are bytes read, each
// range with pread at a checked file offset into a tensor of exactly that many
// bytes. Allocation is bounded by the file size, and the header's JSON by
// NOTE [ Header size ]. No JSON value from the file is ever serialised back
// (deep nesting would recurse), only its type name.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <optional>
#include <tuple>
#include <utility>

#include <nlohmann/json.hpp>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/numbers.h"
#include "absl/strings/strip.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "encore/autograd.h"
#include "encore/checkpoint.h"
#include "src/core/atomic_file.h"
#include "src/core/stream.h"
#include "src/io/safetensors_file.h"

namespace encore {
namespace {

// NOTE [ Byte order ]: tensor bytes are written and read exactly as they lie
// in memory, and the format is little-endian. A big-endian host would need
// byte swaps, which encore does not implement, so it refuses to build there.
static_assert(std::endian::native == std::endian::little,
              "encore's safetensors I/O needs a little-endian host: the format is little-endian and "
              "tensor bytes are copied without swapping");

using Json = nlohmann::json;
using OrderedJson = nlohmann::ordered_json;

constexpr uint64_t kPrefixBytes = 8;                // the u64 header length before the JSON
constexpr uint64_t kMaxHeaderBytes = 100'000'000;   // same cap as the reference implementation
constexpr int kMaxJsonDepth = 16;                   // real headers nest 3 deep
// NOTE [ Entry limit ]: the header's JSON is parsed by nlohmann-json at 2-6
// us an entry (a SAX pass, then the DOM), so a million entries would take
// 3-7 s; the largest real checkpoints list a few thousand tensors a file.
// Headers of more entries are refused as soon as the SAX pass counts one
// too many (a million-entry header: refused after parsing a tenth of it),
// and saving more is refused too, so encore never writes a file it cannot
// read. At the limit a header parses in about 0.6 s on the build machine
// (bench/safetensors_bench).
constexpr int64_t kMaxEntries = 100'000;
// NOTE [ Header size ]: nlohmann's DOM of a header takes about 10 times its
// bytes for real entries, and 21 times for a hostile one such as
// "x":[[],[],...] (each "[]" a heap vector). So the SAX pass, before the DOM
// is built, refuses an entry of more JSON values than a real one has (its
// object, dtype, shape and its up to kMaxDims dims, data_offsets and its
// two numbers: 6 + kMaxDims), with room for one small unknown field, and
// "__metadata__" of more than kMaxEntries keys (or values). With the entry
// limit, the DOM of any header the SAX pass accepts stays under about 300 MB
// beside its strings (measured: 100,000 entries of 16 empty objects, 256 MB;
// 100,000 real entries, 65-70 MB), where a 99 MB "x":[[],...] took 2 GB.
constexpr int64_t kMaxEntryValues = 16;
static_assert(6 + kMaxDims < kMaxEntryValues);
constexpr size_t kMaxListedNames = 8;               // names listed in one error message
constexpr absl::string_view kMetadataKey = "__metadata__";

// ---- format tables ----

struct DTypeCode {
  DType dtype;
  absl::string_view code;
};
constexpr DTypeCode kDTypeCodes[] = {{kFloat32, "F32"}, {kFloat16, "F16"}, {kBFloat16, "BF16"},
                                     {kInt32, "I32"},   {kInt64, "I64"},   {kBool, "BOOL"}};
// Valid safetensors dtypes that encore does not store: Unimplemented, not "unknown".
constexpr absl::string_view kForeignDTypes[] = {"F64", "I8",      "U8",      "I16",     "U16",     "U32", "U64",
                                               "C64", "F8_E4M3", "F8_E5M2", "F8_E8M0", "F6_E2M3", "F6_E3M2", "F4"};

absl::string_view dtype_code(DType t) {
  for (const DTypeCode& c : kDTypeCodes) {
    if (c.dtype == t) return c.code;
  }
  return "?";
}

std::optional<DType> dtype_from_code(absl::string_view code) {
  for (const DTypeCode& c : kDTypeCodes) {
    if (c.code == code) return c.dtype;
  }
  return std::nullopt;
}

// ---- errors and files ----

// The operation and file every message starts with: "load_into: /ckpt/m.safetensors: ...".
struct Where {
  const char* op;
  const std::string& path;
  // load_into with LoadOptions::convert_dtypes: F64 entries are read (as F32,
  // converted on the way) instead of refused as Unimplemented.
  bool read_f64 = false;

  absl::Status error(absl::StatusCode code, absl::string_view problem) const {
    return absl::Status(code, absl::StrCat(op, ": ", path, ": ", problem));
  }
  absl::Status tensor_error(absl::StatusCode code, absl::string_view name, absl::string_view problem) const {
    return error(code, absl::StrCat("tensor \"", name, "\": ", problem));
  }
  // The code follows errno (ENOENT -> NotFound, ENOSPC -> ResourceExhausted, ...);
  // the message ends with the errno text.
  absl::Status io_error(absl::string_view action, const std::string& file, int err) const {
    return absl::ErrnoToStatus(err, absl::StrCat(op, ": ", action, " ", file));
  }
  // An encore::Error caught on the way (e.g. host access refused during capture).
  absl::Status wrap(const absl::Status& s) const { return s.ok() ? s : error(s.code(), s.message()); }
};

std::string quoted_list(const std::vector<std::string>& names) {
  std::vector<std::string> shown;
  for (size_t i = 0; i < names.size() && i < kMaxListedNames; ++i) shown.push_back(absl::StrCat("\"", names[i], "\""));
  std::string out = absl::StrJoin(shown, ", ");
  if (names.size() > kMaxListedNames) absl::StrAppend(&out, " and ", names.size() - kMaxListedNames, " more");
  return out;
}

// Reads up to n bytes at file offset `offset`; returns the count read (short
// only at end of file), or -1 with errno set.
int64_t pread_full(int fd, void* dst, uint64_t n, uint64_t offset) {
  uint64_t done = 0;
  while (done < n) {
    const ssize_t r = ::pread(fd, static_cast<char*>(dst) + done, n - done, static_cast<off_t>(offset + done));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return -1;
    if (r == 0) break;
    done += static_cast<uint64_t>(r);
  }
  return static_cast<int64_t>(done);
}

// Reads exactly n bytes at `offset`; a short read means the file changed under us.
absl::Status read_exact(const Where& w, int fd, void* dst, uint64_t n, uint64_t offset) {
  const int64_t got = pread_full(fd, dst, n, offset);
  if (got < 0) return w.io_error("cannot read", w.path, errno);
  if (static_cast<uint64_t>(got) != n) {
    return w.error(absl::StatusCode::kDataLoss,
                   absl::StrFormat("file ended after %d of %d bytes at file offset %d (did it change while "
                                   "being read?)", got, n, offset));
  }
  return absl::OkStatus();
}

struct OpenFile {
  UniqueFd fd;
  uint64_t bytes;  // file size
};

// Opened with O_NONBLOCK, which a fifo without a writer would otherwise wait
// for forever, and refused unless it is a regular file; then blocking again.
absl::StatusOr<OpenFile> open_for_reading(const Where& w) {
  UniqueFd fd(::open(w.path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY));
  if (fd.get() < 0) return w.io_error("cannot open", w.path, errno);
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return w.io_error("cannot stat", w.path, errno);
  if (!S_ISREG(st.st_mode)) return w.error(absl::StatusCode::kInvalidArgument, "not a regular file");
  const int flags = ::fcntl(fd.get(), F_GETFL);
  if (flags < 0 || ::fcntl(fd.get(), F_SETFL, flags & ~O_NONBLOCK) != 0) {
    return w.io_error("cannot clear O_NONBLOCK of", w.path, errno);
  }
  return OpenFile{std::move(fd), static_cast<uint64_t>(st.st_size)};
}

// ---- header parsing and validation ----

struct Entry {
  std::string name;
  DType dtype = kFloat32;   // as read: F64 entries (f64 true) are read into F32
  bool f64 = false;         // the file stores F64 (only when Where::read_f64)
  Shape shape;
  uint64_t begin = 0;  // bytes, relative to the data section
  uint64_t end = 0;
};

struct Header {
  std::vector<Entry> entries;  // sorted by data offset once validated
  std::map<std::string, std::string> metadata;
  uint64_t data_start = 0;     // file offset of the data section, bytes
};

// "an array", "the number 3.5": describes a JSON value without serialising a
// possibly deep structure (see NOTE [ Hostile files ]).
std::string describe(const Json& v) {
  if (v.is_structured()) return absl::StrCat("a JSON ", v.type_name());
  std::string text = v.dump(-1, ' ', false, Json::error_handler_t::replace);
  if (text.size() > 40) text = absl::StrCat(text.substr(0, 37), "...");
  return absl::StrCat("the ", v.type_name(), " ", text);
}

// A non-negative JSON integer (not a float, even 2.0).
std::optional<uint64_t> as_u64(const Json& v) {
  if (v.is_number_unsigned()) return v.get<uint64_t>();
  if (v.is_number_integer() && v.get<int64_t>() >= 0) return static_cast<uint64_t>(v.get<int64_t>());
  return std::nullopt;
}

// JSON allows repeated keys and nlohmann keeps the last one silently; the
// format forbids them (two "w" entries would mean different tensors to
// different readers), and real headers nest 3 deep. A first SAX pass checks
// both, the syntax and the header's size (NOTE [ Header size ]) before the
// DOM is built.
//
// NOTE [ Linear header parsing ]: not with nlohmann's parse callback: its
// DOM builder scans the whole parent object at the end of every child
// object (to drop discarded values), so a header of n entries took O(n^2)
// (60,000 entries: 28 s). The SAX pass and the plain DOM parse are linear.
class HeaderChecker final : public nlohmann::json_sax<Json> {
 public:
  bool null() override { return value(); }
  bool boolean(bool) override { return value(); }
  bool number_integer(number_integer_t) override { return value(); }
  bool number_unsigned(number_unsigned_t) override { return value(); }
  bool number_float(number_float_t, const string_t&) override { return value(); }
  bool string(string_t&) override { return value(); }
  bool binary(binary_t&) override { return value(); }
  bool start_object(std::size_t) override {
    if (!value() || !open()) return false;
    keys_.emplace_back();
    return true;
  }
  bool key(string_t& k) override {
    if (depth_ == 1) {
      member_ = k;
      member_values_ = 0;
    }
    if (depth_ == 1 && k != kMetadataKey && ++entries_ > kMaxEntries) {
      problem = absl::StrCat("the header lists more than ", kMaxEntries,
                             " tensors, encore's limit (NOTE [ Entry limit ] in src/io/safetensors.cpp)");
      return false;
    }
    if (keys_.back().insert(k).second) return true;
    problem = absl::StrCat("the header has the key \"", k,
                           "\" twice; the format forbids duplicate keys (and so duplicate tensor names)");
    return false;
  }
  bool end_object() override {
    keys_.pop_back();
    --depth_;
    return true;
  }
  bool start_array(std::size_t) override {
    if (depth_ == 0) {   // refused below anyway, but its elements would all reach the DOM
      problem = "the header is a JSON array, not a JSON object";
      return false;
    }
    return value() && open();
  }
  bool end_array() override {
    --depth_;
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& e) override {
    // The byte counts from 1; the header starts at file offset 8.
    const auto* pe = dynamic_cast<const nlohmann::detail::parse_error*>(&e);
    const size_t byte = pe != nullptr ? pe->byte : 0;
    problem = absl::StrFormat("the header is not valid JSON at header byte %d (file offset %d): %s", byte,
                              byte - 1 + kPrefixBytes, e.what());
    return false;
  }

  std::string problem;   // why the header was refused; empty when it was not

 private:
  // Counts a value towards the top-level member it is part of (NOTE [ Header size ]).
  bool value() {
    if (depth_ == 0) return true;   // the header itself
    const bool metadata = member_ == kMetadataKey;
    if (++member_values_ <= (metadata ? kMaxEntries + 1 : kMaxEntryValues)) return true;
    problem = metadata ? absl::StrCat("\"__metadata__\" holds more than ", kMaxEntries,
                                      " values (it maps keys to strings), encore's limit")
                       : absl::StrCat("tensor \"", member_, "\": the entry holds more than ", kMaxEntryValues,
                                      " JSON values; dtype, shape and data_offsets need at most ", 6 + kMaxDims);
    problem += " (NOTE [ Header size ] in src/io/safetensors.cpp)";
    return false;
  }
  bool open() {   // a container opens inside depth_ others
    if (depth_ >= kMaxJsonDepth) {
      problem = absl::StrCat("the header nests JSON deeper than ", kMaxJsonDepth, " levels");
      return false;
    }
    ++depth_;
    return true;
  }
  int depth_ = 0;
  int64_t entries_ = 0;                        // the top-level object's keys but the metadata's
  std::string member_;                         // the top-level key whose value is being read
  int64_t member_values_ = 0;                  // JSON values in it so far
  std::vector<absl::flat_hash_set<std::string>> keys_;   // keys seen, one set per open object
};

absl::StatusOr<Json> parse_json(const Where& w, const std::string& text) {
  const absl::StatusCode bad = absl::StatusCode::kInvalidArgument;
  // nlohmann stops at a NUL as at the end of the input: bytes after one would go unread.
  if (const size_t nul = text.find('\0'); nul != std::string::npos) {
    return w.error(bad, absl::StrFormat("the header has a NUL byte at header byte %d (file offset %d); JSON text "
                                        "holds none", nul + 1, nul + kPrefixBytes));
  }
  try {
    HeaderChecker checker;
    if (!Json::sax_parse(text, &checker)) {
      return w.error(bad, checker.problem.empty() ? std::string("the header could not be parsed") : checker.problem);
    }
    return Json::parse(text);
  } catch (const std::exception& e) {
    return w.error(bad, absl::StrCat("the header could not be parsed: ", e.what()));
  }
}

absl::Status parse_metadata(const Where& w, const Json& v, std::map<std::string, std::string>* out) {
  const absl::StatusCode bad = absl::StatusCode::kInvalidArgument;
  if (!v.is_object()) return w.error(bad, absl::StrCat("\"__metadata__\" is ", describe(v), ", not an object"));
  for (const auto& [key, value] : v.items()) {
    if (!value.is_string()) {
      return w.error(bad, absl::StrCat("\"__metadata__\" must map strings to strings, but \"", key, "\" holds ",
                                       describe(value)));
    }
    (*out)[key] = value.get<std::string>();
  }
  return absl::OkStatus();
}

absl::StatusOr<DType> parse_dtype(const Where& w, const std::string& name, const Json& v) {
  if (!v.is_string()) {
    return w.tensor_error(absl::StatusCode::kInvalidArgument, name,
                          absl::StrCat("\"dtype\" is ", describe(v), ", not a string"));
  }
  const std::string& code = v.get_ref<const std::string&>();
  if (std::optional<DType> t = dtype_from_code(code)) return *t;
  if (std::find(std::begin(kForeignDTypes), std::end(kForeignDTypes), code) != std::end(kForeignDTypes)) {
    return w.tensor_error(absl::StatusCode::kUnimplemented, name,
                          absl::StrCat("dtype \"", code, "\" is valid safetensors but encore stores only "
                                       "F32, F16, BF16, I32, I64 and BOOL",
                                       code == "F64" ? " (load_into with LoadOptions::convert_dtypes reads F64 "
                                                       "into float targets)" : ""));
  }
  return w.tensor_error(absl::StatusCode::kInvalidArgument, name,
                        absl::StrCat("unknown dtype \"", code, "\" (encore reads F32, F16, BF16, I32, I64, BOOL)"));
}

absl::StatusOr<Shape> parse_shape(const Where& w, const std::string& name, const Json& v) {
  const absl::StatusCode bad = absl::StatusCode::kInvalidArgument;
  if (!v.is_array()) return w.tensor_error(bad, name, absl::StrCat("\"shape\" is ", describe(v), ", not an array"));
  if (v.size() > static_cast<size_t>(kMaxDims)) {
    return w.tensor_error(absl::StatusCode::kUnimplemented, name,
                          absl::StrFormat("shape has %d dims; encore tensors have at most %d", v.size(), kMaxDims));
  }
  Shape shape;
  for (size_t d = 0; d < v.size(); ++d) {
    std::optional<uint64_t> s = as_u64(v[d]);
    if (!s || *s > static_cast<uint64_t>(INT64_MAX)) {
      return w.tensor_error(bad, name, absl::StrFormat("shape dim %d is %s, not a non-negative integer", d,
                                                       describe(v[d])));
    }
    shape.push_back(static_cast<int64_t>(*s));
  }
  return shape;
}

// Reads data_offsets and checks them against shape and dtype; the layout of
// all entries together is check_layout's job.
absl::Status parse_offsets(const Where& w, const Json& v, Entry* e) {
  const absl::StatusCode bad = absl::StatusCode::kInvalidArgument;
  std::optional<uint64_t> begin, end;
  if (v.is_array() && v.size() == 2) {
    begin = as_u64(v[0]);
    end = as_u64(v[1]);
  }
  if (!begin || !end) {
    return w.tensor_error(bad, e->name, absl::StrCat("\"data_offsets\" is ", describe(v),
                                                     ", not [begin, end] with two non-negative integers"));
  }
  if (*begin > *end) {
    return w.tensor_error(bad, e->name, absl::StrFormat("data_offsets [%d, %d] end before they begin", *begin, *end));
  }
  // Bytes the shape needs, without overflow (a hostile shape can be huge).
  int64_t nbytes = e->f64 ? 8 : dtype_size(e->dtype);
  for (int64_t s : e->shape) {
    if (__builtin_mul_overflow(nbytes, s, &nbytes)) {
      return w.tensor_error(bad, e->name, absl::StrFormat("shape %s of %s overflows 64-bit byte counts",
                                                          shape_str(e->shape), dtype_code(e->dtype)));
    }
  }
  if (static_cast<uint64_t>(nbytes) != *end - *begin) {
    return w.tensor_error(bad, e->name,
                          absl::StrFormat("shape %s of %s needs %d bytes but data_offsets [%d, %d] hold %d",
                                          shape_str(e->shape), dtype_code(e->dtype), nbytes, *begin, *end,
                                          *end - *begin));
  }
  e->begin = *begin;
  e->end = *end;
  return absl::OkStatus();
}

absl::StatusOr<Entry> parse_entry(const Where& w, const std::string& name, const Json& v) {
  const absl::StatusCode bad = absl::StatusCode::kInvalidArgument;
  if (!v.is_object()) {
    return w.tensor_error(bad, name, absl::StrCat("entry is ", describe(v),
                                                  ", not an object with dtype, shape and data_offsets"));
  }
  for (const char* field : {"dtype", "shape", "data_offsets"}) {
    if (!v.contains(field)) return w.tensor_error(bad, name, absl::StrCat("entry has no \"", field, "\""));
  }
  Entry e{.name = name};
  e.f64 = w.read_f64 && v["dtype"].is_string() && v["dtype"].get<std::string>() == "F64";
  absl::StatusOr<DType> dtype = e.f64 ? kFloat32 : parse_dtype(w, name, v["dtype"]);
  if (!dtype.ok()) return dtype.status();
  e.dtype = *dtype;
  absl::StatusOr<Shape> shape = parse_shape(w, name, v["shape"]);
  if (!shape.ok()) return shape.status();
  e.shape = *std::move(shape);
  absl::Status s = parse_offsets(w, v["data_offsets"], &e);
  if (!s.ok()) return s;
  return e;
}

// NOTE [ Full coverage ]: the spec says "the byte buffer needs to be entirely
// indexed, and cannot contain holes" (this prevents polyglot files), and the
// reference reader refuses gaps, overlaps and trailing bytes. So sorted by
// offset, each tensor must begin where the previous one ended, starting at 0,
// and the last must end at the end of the file. Sorts `entries` by offset.
absl::Status check_layout(const Where& w, std::vector<Entry>& entries, uint64_t data_bytes) {
  for (const Entry& e : entries) {
    if (e.end > data_bytes) {
      return w.tensor_error(absl::StatusCode::kDataLoss, e.name,
                            absl::StrFormat("data_offsets [%d, %d] run past the end of the %d-byte data section "
                                            "(the file is truncated or the offsets are wrong)",
                                            e.begin, e.end, data_bytes));
    }
  }
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return std::tie(a.begin, a.end, a.name) < std::tie(b.begin, b.end, b.name);
  });
  const absl::StatusCode bad = absl::StatusCode::kInvalidArgument;
  uint64_t covered = 0;  // bytes of the data section accounted for so far
  for (size_t i = 0; i < entries.size(); ++i) {
    const Entry& e = entries[i];
    if (e.begin < covered) {
      const Entry& p = entries[i - 1];
      return w.tensor_error(bad, e.name, absl::StrFormat("data_offsets [%d, %d] overlap those of tensor \"%s\" [%d, %d]",
                                                         e.begin, e.end, p.name, p.begin, p.end));
    }
    if (e.begin > covered) {
      return w.tensor_error(bad, e.name,
                            absl::StrFormat("data_offsets [%d, %d] leave bytes [%d, %d) of the data section "
                                            "covered by no tensor; the format allows no holes", e.begin, e.end,
                                            covered, e.begin));
    }
    covered = e.end;
  }
  if (covered != data_bytes) {
    return w.error(bad, absl::StrFormat("the data section has %d bytes but its tensors cover only the first %d; "
                                        "the format allows no uncovered bytes", data_bytes, covered));
  }
  return absl::OkStatus();
}

absl::StatusOr<Header> parse_header(const Where& w, const std::string& text, uint64_t data_bytes) {
  absl::StatusOr<Json> json = parse_json(w, text);
  if (!json.ok()) return json.status();
  if (!json->is_object()) {
    return w.error(absl::StatusCode::kInvalidArgument,
                   absl::StrCat("the header is ", describe(*json), ", not a JSON object"));
  }
  Header h;
  for (const auto& [key, value] : json->items()) {
    if (key == kMetadataKey) {
      absl::Status s = parse_metadata(w, value, &h.metadata);
      if (!s.ok()) return s;
      continue;
    }
    if (key.empty()) {
      return w.tensor_error(absl::StatusCode::kInvalidArgument, key,
                            "the name is empty (save_safetensors refuses empty names too)");
    }
    absl::StatusOr<Entry> e = parse_entry(w, key, value);
    if (!e.ok()) return e.status();
    h.entries.push_back(*std::move(e));
  }
  absl::Status s = check_layout(w, h.entries, data_bytes);
  if (!s.ok()) return s;
  return h;
}

// Reads and validates the prefix and header of an open file (not the data).
absl::StatusOr<Header> read_header(const Where& w, const OpenFile& f) {
  if (f.bytes < kPrefixBytes) {
    return w.error(absl::StatusCode::kDataLoss,
                   absl::StrFormat("the file has %d bytes, fewer than the 8-byte header length", f.bytes));
  }
  unsigned char prefix[kPrefixBytes];
  absl::Status s = read_exact(w, f.fd.get(), prefix, kPrefixBytes, 0);
  if (!s.ok()) return s;
  uint64_t n = 0;  // little-endian u64, decoded byte by byte
  for (uint64_t i = 0; i < kPrefixBytes; ++i) n |= static_cast<uint64_t>(prefix[i]) << (8 * i);
  if (n > kMaxHeaderBytes) {
    return w.error(absl::StatusCode::kInvalidArgument,
                   absl::StrFormat("header length %d bytes exceeds the limit of %d bytes", n, kMaxHeaderBytes));
  }
  if (n > f.bytes - kPrefixBytes) {
    return w.error(absl::StatusCode::kDataLoss,
                   absl::StrFormat("header length %d bytes runs past the end of the file (%d bytes follow the "
                                   "8-byte length)", n, f.bytes - kPrefixBytes));
  }
  std::string text(n, '\0');
  s = read_exact(w, f.fd.get(), text.data(), n, kPrefixBytes);
  if (!s.ok()) return s;
  absl::StatusOr<Header> h = parse_header(w, text, f.bytes - kPrefixBytes - n);
  if (h.ok()) h->data_start = kPrefixBytes + n;
  return h;
}

// ---- loading ----

// A BOOL byte other than 0 or 1 is not a bool encore's kernels can use.
absl::Status check_bools(const Where& w, const std::string& name, const Tensor& t) {
  const auto* p = static_cast<const uint8_t*>(t.data_ptr());
  for (int64_t i = 0; i < t.numel(); ++i) {
    if (p[i] > 1) {
      return w.tensor_error(absl::StatusCode::kInvalidArgument, name,
                            absl::StrFormat("BOOL element %d is the byte 0x%02x, not 0 or 1", i, p[i]));
    }
  }
  return absl::OkStatus();
}

// Reads every tensor of a validated header into new CPU tensors. The bytes go
// straight from the file into storage nobody else sees yet, after
// host_access (which a capture refuses); a device loader would stage through
// the stream instead.
// `wanted` (when given) selects the entries to read; the rest are skipped.
// F64 entries are rounded to nearest F32 as they are read.
absl::StatusOr<NamedTensors> read_tensors(const Where& w, const OpenFile& f, const Header& h,
                                          const absl::flat_hash_set<absl::string_view>* wanted = nullptr) {
  std::vector<const Entry*> entries;
  for (const Entry& e : h.entries) {
    if (wanted == nullptr || wanted->contains(e.name)) entries.push_back(&e);
  }
  NamedTensors out;
  absl::Status s = status_of([&] {
    current_stream(kCPU).host_access(w.op);
    out.reserve(entries.size());
    for (const Entry* e : entries) out.emplace_back(e->name, empty(e->shape, e->dtype, kCPU));
  });
  if (!s.ok()) return w.wrap(s);
  for (size_t i = 0; i < out.size(); ++i) {
    const Entry& e = *entries[i];
    Tensor& t = out[i].second;
    if (e.f64) {
      std::vector<double> wide(static_cast<size_t>(t.numel()));
      s = read_exact(w, f.fd.get(), wide.data(), e.end - e.begin, h.data_start + e.begin);
      float* narrow = static_cast<float*>(t.data_ptr());
      for (size_t k = 0; s.ok() && k < wide.size(); ++k) narrow[k] = static_cast<float>(wide[k]);
    } else {
      s = read_exact(w, f.fd.get(), t.data_ptr(), e.end - e.begin, h.data_start + e.begin);
    }
    if (s.ok() && e.dtype == kBool) s = check_bools(w, e.name, t);
    if (!s.ok()) return s;
  }
  return out;
}

// A file opened for reading and its header, read and validated once: every
// reader starts here (after removing a crashed save's leftovers).
struct ReadFile {
  OpenFile file;
  Header header;
};

absl::StatusOr<ReadFile> open_with_header(const Where& w) {
  remove_stale_temporaries(w.path);   // NOTE [ Stale temporaries ] in src/core/atomic_file.cpp
  absl::StatusOr<OpenFile> f = open_for_reading(w);
  if (!f.ok()) return f.status();
  absl::StatusOr<Header> h = read_header(w, *f);
  if (!h.ok()) return h.status();
  return ReadFile{*std::move(f), *std::move(h)};
}

absl::StatusOr<NamedTensors> load(const Where& w) {
  absl::StatusOr<ReadFile> r = open_with_header(w);
  if (!r.ok()) return r.status();
  return read_tensors(w, r->file, r->header);
}

// Names must be non-empty, unique, not the metadata key, and name a tensor.
absl::Status check_names(const Where& w, const NamedTensors& tensors) {
  const absl::StatusCode bad = absl::StatusCode::kInvalidArgument;
  if (static_cast<int64_t>(tensors.size()) > kMaxEntries) {
    return w.error(bad, absl::StrFormat("%d tensors, more than the %d a file may hold (NOTE [ Entry limit ] in "
                                        "src/io/safetensors.cpp)", tensors.size(), kMaxEntries));
  }
  absl::flat_hash_map<absl::string_view, size_t> seen;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const auto& [name, t] = tensors[i];
    if (name.empty()) return w.error(bad, absl::StrFormat("tensor %d has an empty name", i));
    if (name == kMetadataKey) return w.tensor_error(bad, name, "the name is reserved for the header's metadata");
    if (auto [it, fresh] = seen.emplace(name, i); !fresh) {
      return w.tensor_error(bad, name, absl::StrFormat("the name is used twice (tensors %d and %d)", it->second, i));
    }
    if (!t.defined()) return w.tensor_error(bad, name, "the tensor is undefined");
  }
  return absl::OkStatus();
}

// Targets the file lacks and file tensors no target names, each in order.
void compare_names(const Header& h, const NamedTensors& targets, std::vector<std::string>* missing,
                   std::vector<std::string>* extra) {
  absl::flat_hash_set<absl::string_view> in_file, wanted;
  for (const Entry& e : h.entries) in_file.insert(e.name);
  for (const auto& [name, t] : targets) {
    wanted.insert(name);
    if (!in_file.contains(name)) missing->push_back(name);
  }
  for (const Entry& e : h.entries) {
    if (!wanted.contains(e.name)) extra->push_back(e.name);
  }
}

// Strict names: every target in the file, and nothing else in the file.
absl::Status check_same_names(const Where& w, const std::vector<std::string>& missing,
                              const std::vector<std::string>& extra) {
  const std::string extra_note =
      extra.empty() ? "" : absl::StrCat("; the file also holds tensors no target names: ", quoted_list(extra));
  if (!missing.empty()) {
    return w.tensor_error(absl::StatusCode::kNotFound, missing[0],
                          absl::StrCat("not in the file (missing: ", quoted_list(missing), ")", extra_note));
  }
  if (!extra.empty()) {
    return w.error(absl::StatusCode::kInvalidArgument,
                   absl::StrCat("the file holds tensors no target names: ", quoted_list(extra),
                                " (loading is strict, like load_state_dict(strict=True))"));
  }
  return absl::OkStatus();
}

// The file tensor for `target`, converted to its device (and, with
// convert_dtypes, from one float dtype to the target's, noted in `report`);
// checks shape, dtype and that an in-place copy can write it.
absl::StatusOr<Tensor> source_for(const Where& w, const std::string& name, const Entry& e, const Tensor& src,
                                  const Tensor& target, const LoadOptions& options, LoadReport* report) {
  const std::string file_dtype(e.f64 ? "f64" : dtype_name(src.dtype()));
  const bool convert = options.convert_dtypes && (e.f64 || src.dtype() != target.dtype()) &&
                       is_floating(src.dtype()) && is_floating(target.dtype());
  if (src.shape() != target.shape() || (src.dtype() != target.dtype() && !convert) || (e.f64 && !convert)) {
    const bool floats = is_floating(src.dtype()) && is_floating(target.dtype());
    return w.tensor_error(absl::StatusCode::kInvalidArgument, name,
                          absl::StrFormat("the file has shape %s (%s) but the target has shape %s (%s)%s",
                                          shape_str(src.shape()), file_dtype, shape_str(target.shape()),
                                          dtype_name(target.dtype()),
                                          src.shape() == target.shape() && floats && !options.convert_dtypes
                                              ? "; LoadOptions::convert_dtypes converts float dtypes"
                                              : ""));
  }
  if (convert && report != nullptr) {
    report->converted.push_back(absl::StrCat(name, ": ", file_dtype, " -> ", std::string(dtype_name(target.dtype()))));
  }
  for (int64_t d = 0; d < target.dim(); ++d) {
    if (target.strides()[d] == 0 && target.shape()[d] > 1) {
      return w.tensor_error(absl::StatusCode::kInvalidArgument, name,
                            absl::StrFormat("the target of shape %s is a broadcast (expanded) view and cannot be "
                                            "written in place", shape_str(target.shape())));
    }
  }
  Tensor out;
  absl::Status s = status_of([&] { out = (convert ? src.to(target.dtype()) : src).to(target.device()); });
  if (!s.ok()) return w.tensor_error(s.code(), name, s.message());
  return out;
}

// ---- saving ----

// The JSON header, padded with spaces so the data section starts 8-byte
// aligned. Refused when a load would refuse it (too long, too much metadata).
absl::StatusOr<std::string> build_header(const Where& w, const NamedTensors& tensors,
                                         const std::map<std::string, std::string>& metadata) {
  if (static_cast<int64_t>(metadata.size()) > kMaxEntries) {
    return w.error(absl::StatusCode::kInvalidArgument,
                   absl::StrFormat("%d metadata keys, more than the %d a file may hold (NOTE [ Header size ] in "
                                   "src/io/safetensors.cpp)", metadata.size(), kMaxEntries));
  }
  OrderedJson h = OrderedJson::object();
  if (!metadata.empty()) h[std::string(kMetadataKey)] = metadata;
  uint64_t offset = 0;  // bytes into the data section
  for (const auto& [name, t] : tensors) {
    const uint64_t nbytes = static_cast<uint64_t>(t.numel() * dtype_size(t.dtype()));
    OrderedJson shape = OrderedJson::array();
    for (int64_t s : t.shape()) shape.push_back(s);
    OrderedJson entry = OrderedJson::object();
    entry["dtype"] = std::string(dtype_code(t.dtype()));
    entry["shape"] = std::move(shape);
    entry["data_offsets"] = OrderedJson::array({offset, offset + nbytes});
    h[name] = std::move(entry);
    offset += nbytes;
  }
  std::string text;
  try {
    text = h.dump();  // strict: throws on invalid UTF-8
  } catch (const std::exception& e) {
    return w.error(absl::StatusCode::kInvalidArgument,
                   absl::StrCat("a tensor name or metadata string is not valid UTF-8: ", e.what()));
  }
  text.append((8 - (kPrefixBytes + text.size()) % 8) % 8, ' ');
  if (text.size() > kMaxHeaderBytes) {
    return w.error(absl::StatusCode::kInvalidArgument,
                   absl::StrFormat("the header would be %d bytes, more than the %d bytes a load accepts (long "
                                   "tensor names or metadata)", text.size(), kMaxHeaderBytes));
  }
  return text;
}

// Writes prefix, header and data to an open file.
absl::Status write_safetensors(const Where& w, int fd, const std::string& file, const std::string& header,
                               const NamedTensors& tensors) {
  unsigned char prefix[kPrefixBytes];
  for (uint64_t i = 0; i < kPrefixBytes; ++i) prefix[i] = static_cast<unsigned char>(header.size() >> (8 * i));
  if (!write_full(fd, prefix, kPrefixBytes) || !write_full(fd, header.data(), header.size())) {
    return w.io_error("cannot write", file, errno);
  }
  // NOTE [ No structured bindings in lambdas ]: the lambda below names the
  // tensor through a plain reference, not a structured binding: clang 14
  // refuses to capture a binding, and clang 16 refuses it under -fopenmp.
  for (const auto& entry : tensors) {
    const std::string& name = entry.first;
    const Tensor& t = entry.second;
    Tensor c;  // one contiguous CPU copy at a time keeps peak memory low
    absl::Status s = status_of([&] {
      current_stream(t.device()).host_access(w.op);
      c = t.detach().contiguous();
      if (!c.device().is_cpu()) c = c.to(kCPU);
    });
    if (!s.ok()) return w.tensor_error(s.code(), name, s.message());
    if (!write_full(fd, c.data_ptr(), static_cast<uint64_t>(c.numel() * dtype_size(c.dtype())))) {
      return w.io_error("cannot write", file, errno);
    }
  }
  return absl::OkStatus();
}

// Everything load_into does once the file is open and its header read.
absl::Status load_from(const Where& w, const OpenFile& f, const Header& h, const NamedTensors& targets,
                       const LoadOptions& options, LoadReport* report) {
  absl::Status s = check_names(w, targets);
  if (!s.ok()) return s;
  LoadReport local;
  LoadReport& r = report != nullptr ? *report : local;
  r = LoadReport{};
  compare_names(h, targets, &r.missing, &r.unexpected);
  absl::flat_hash_set<absl::string_view> wanted;
  for (const auto& [name, t] : targets) wanted.insert(name);
  // F64 is read only when converting (a file opened without read_f64 has no
  // such entries: they were refused with the header).
  const Entry* f64 = nullptr;   // the first by name, as the header's parse would meet it
  for (const Entry& e : h.entries) {
    if (e.f64 && (options.strict || wanted.contains(e.name)) && (f64 == nullptr || e.name < f64->name)) f64 = &e;
  }
  if (f64 != nullptr && !options.convert_dtypes) return parse_dtype(w, f64->name, Json("F64")).status();
  // Strict: the whole file is read and validated before names are compared
  // (a malformed file is reported as such). Not strict: only the targeted
  // tensors are read.
  absl::StatusOr<NamedTensors> file = read_tensors(w, f, h, options.strict ? nullptr : &wanted);
  if (!file.ok()) return file.status();
  if (options.strict) {
    s = check_same_names(w, r.missing, r.unexpected);
    if (!s.ok()) return s;
  }
  absl::flat_hash_map<absl::string_view, std::pair<const Entry*, const Tensor*>> by_name;
  for (size_t i = 0, j = 0; i < h.entries.size(); ++i) {
    const bool read = options.strict || wanted.contains(h.entries[i].name);
    if (read) by_name[h.entries[i].name] = {&h.entries[i], &(*file)[j++].second};
  }
  std::vector<std::pair<Tensor, Tensor>> copies;   // (target, source); checked before any is written
  for (const auto& [name, target] : targets) {
    auto it = by_name.find(name);
    if (it == by_name.end()) continue;   // missing, allowed when not strict
    absl::StatusOr<Tensor> src = source_for(w, name, *it->second.first, *it->second.second, target, options, &r);
    if (!src.ok()) return src.status();
    copies.emplace_back(target, *std::move(src));
  }
  // Everything is read and checked: from here on only in-place copies, which
  // keep each target's storage (and any captured graph pointing at it).
  NoGradGuard no_grad;
  s = status_of([&] {
    for (auto& [target, src] : copies) target.copy_(src);
  });
  return w.wrap(s);
}

// The validated header of w.path, for the functions that read nothing else.
absl::StatusOr<Header> header_only(const Where& w) {
  absl::StatusOr<ReadFile> r = open_with_header(w);
  if (!r.ok()) return r.status();
  return std::move(r->header);
}

}  // namespace

// ---- files for src/io (safetensors_file.h) ----

namespace io {

struct SafetensorsFile::State {
  const char* op;
  std::string path;
  ReadFile read;
  Where where() const { return Where{op, path, /*read_f64=*/true}; }
};

absl::StatusOr<SafetensorsFile> SafetensorsFile::open(const char* op, const std::string& path) {
  absl::StatusOr<ReadFile> r = open_with_header(Where{op, path, /*read_f64=*/true});
  if (!r.ok()) return r.status();
  return SafetensorsFile(std::make_unique<State>(State{op, path, *std::move(r)}));
}

SafetensorsFile::SafetensorsFile(std::unique_ptr<State> state) : state_(std::move(state)) {}
SafetensorsFile::SafetensorsFile(SafetensorsFile&&) noexcept = default;
SafetensorsFile& SafetensorsFile::operator=(SafetensorsFile&&) noexcept = default;
SafetensorsFile::~SafetensorsFile() = default;

const std::map<std::string, std::string>& SafetensorsFile::metadata() const { return state_->read.header.metadata; }

std::vector<std::pair<std::string, Shape>> SafetensorsFile::shapes() const {
  std::vector<std::pair<std::string, Shape>> out;
  out.reserve(state_->read.header.entries.size());
  for (const Entry& e : state_->read.header.entries) out.emplace_back(e.name, e.shape);
  return out;
}

absl::Status SafetensorsFile::load_into(const NamedTensors& targets, const LoadOptions& options,
                                        LoadReport* report) const {
  return load_from(state_->where(), state_->read.file, state_->read.header, targets, options, report);
}

absl::StatusOr<StagedFile> stage_safetensors(const char* op, const std::string& path, const NamedTensors& tensors,
                                             const std::map<std::string, std::string>& metadata) {
  const Where w{op, path};
  absl::Status s = check_names(w, tensors);
  if (!s.ok()) return s;
  absl::StatusOr<std::string> header = build_header(w, tensors, metadata);
  if (!header.ok()) return header.status();
  return stage_file(op, path, [&](int fd, const std::string& tmp) {
    return write_safetensors(w, fd, tmp, *header, tensors);
  });
}

}  // namespace io

// ---- the public API (checkpoint.h) ----

absl::Status save_safetensors(const std::string& path, const NamedTensors& tensors,
                              const std::map<std::string, std::string>& metadata) {
  absl::StatusOr<StagedFile> staged = io::stage_safetensors("save_safetensors", path, tensors, metadata);
  return staged.ok() ? staged->commit() : staged.status();
}

absl::StatusOr<NamedTensors> load_safetensors(const std::string& path) {
  return load(Where{"load_safetensors", path});
}

absl::StatusOr<std::map<std::string, std::string>> load_safetensors_metadata(const std::string& path) {
  absl::StatusOr<Header> h = header_only(Where{"load_safetensors_metadata", path});
  if (!h.ok()) return h.status();
  return std::move(h->metadata);
}

absl::StatusOr<std::vector<std::pair<std::string, Shape>>> load_safetensors_shapes(const std::string& path) {
  absl::StatusOr<Header> h = header_only(Where{"load_safetensors_shapes", path, /*read_f64=*/true});
  if (!h.ok()) return h.status();
  std::vector<std::pair<std::string, Shape>> out;
  out.reserve(h->entries.size());
  for (Entry& e : h->entries) out.emplace_back(std::move(e.name), std::move(e.shape));
  return out;
}

absl::Status load_into(const std::string& path, const NamedTensors& targets) {
  return load_into(path, targets, LoadOptions{}, nullptr);
}

absl::Status load_into(const std::string& path, const NamedTensors& targets, const LoadOptions& options,
                       LoadReport* report) {
  const Where w{"load_into", path, options.convert_dtypes};
  absl::Status s = check_names(w, targets);   // before the file is touched
  if (!s.ok()) return s;
  absl::StatusOr<ReadFile> r = open_with_header(w);
  if (!r.ok()) return r.status();
  return load_from(w, r->file, r->header, targets, options, report);
}

}  // namespace encore
