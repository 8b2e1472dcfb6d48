// Safetensors checkpoints: round trips, files written by hand byte for byte as
// the spec says, atomic saves, strict load_into, and every malformed file.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "encore/checkpoint.h"
#include "encore/encore.h"
#include "src/core/step_observer.h"
#include "tests/test_util.h"

namespace encore {
namespace {

using Bytes = std::vector<uint8_t>;
using absl::StatusCode;
using testing::dead_pid;
using testing::expect_status;

// ---- helpers ----

Bytes read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return Bytes(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void write_bytes(const std::string& path, const Bytes& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

void append_u64_le(Bytes& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<uint8_t>(v >> (8 * i)));
}

uint64_t u64_le(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(p[i]) << (8 * i);
  return v;
}

// A file as another tool writes it: LE u64 length, the header (padded with
// spaces so the data starts 8-byte aligned, when pad), then the data.
Bytes make_file(std::string header, const Bytes& data, bool pad = true) {
  if (pad) header.append((8 - header.size() % 8) % 8, ' ');
  Bytes out;
  append_u64_le(out, header.size());
  out.insert(out.end(), header.begin(), header.end());
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

// The bytes of t's elements, row-major.
Bytes raw_bytes(const Tensor& t) {
  Tensor c = t.contiguous();
  const auto* p = static_cast<const uint8_t*>(c.data_ptr());
  return Bytes(p, p + c.numel() * dtype_size(c.dtype()));
}

template <typename T>
Tensor from_bits(const std::vector<uint16_t>& bits, Shape shape) {
  std::vector<T> v(bits.size());
  for (size_t i = 0; i < bits.size(); ++i) v[i].bits = bits[i];
  return from_vector<T>(v, std::move(shape));
}

class SafetensorsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const ::testing::TestInfo* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = std::filesystem::path(::testing::TempDir()) / absl::StrCat("encore_io_", ::getpid(), "_", info->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  std::vector<std::string> files() const {
    std::vector<std::string> out;
    for (const auto& e : std::filesystem::directory_iterator(dir_)) out.push_back(e.path().filename().string());
    std::sort(out.begin(), out.end());
    return out;
  }

  std::filesystem::path dir_;
};

// ---- round trips ----

TEST_F(SafetensorsTest, RoundTripIsBitExactForEveryDtype) {
  const float nan_payload = std::bit_cast<float>(0x7fc12345u);
  NamedTensors in = {
      {"f32", from_vector<float>({1.5f, -0.0f, std::numeric_limits<float>::infinity(), -3.25e38f, nan_payload,
                                  1e-40f, 0.1f, -7.0f}, {2, 4})},
      {"f16", from_bits<Half>({0x0000, 0x8000, 0x7c00, 0xfc00, 0x7e01, 0x0001, 0x3c00, 0xc500}, {4, 2})},
      {"bf16", from_bits<BFloat16>({0x3f80, 0x8000, 0x7f80, 0x7fc1, 0x0001, 0xc2f7}, {6})},
      {"i32", from_vector<int32_t>({std::numeric_limits<int32_t>::min(), std::numeric_limits<int32_t>::max(), 0, -1,
                                    123456}, {5})},
      {"i64", from_vector<int64_t>({std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max(), 0, -1,
                                    int64_t{1} << 40, 7}, {3, 1, 2})},
      {"bool", from_vector<bool>({true, false, true, true}, {2, 2})},
  };
  ASSERT_TRUE(save_safetensors(path("m.safetensors"), in).ok());
  absl::StatusOr<NamedTensors> out = load_safetensors(path("m.safetensors"));
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_EQ(out->size(), in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    SCOPED_TRACE(in[i].first);
    EXPECT_EQ((*out)[i].first, in[i].first);  // data order = the order given to save
    const Tensor& t = (*out)[i].second;
    EXPECT_EQ(t.dtype(), in[i].second.dtype());
    EXPECT_EQ(t.shape(), in[i].second.shape());
    EXPECT_TRUE(t.device().is_cpu());
    EXPECT_TRUE(t.is_contiguous());
    EXPECT_EQ(raw_bytes(t), raw_bytes(in[i].second));
  }
}

TEST_F(SafetensorsTest, ZeroDimAndEmptyTensorsRoundTrip) {
  NamedTensors in = {
      {"scalar", scalar_tensor(2.5)},
      {"empty", zeros({0})},
      {"empty3d", zeros({2, 0, 3}, kInt64)},
      {"step", scalar_tensor(41, kInt64)},
      {"no_bools", zeros({0, 5}, kBool)},
  };
  ASSERT_TRUE(save_safetensors(path("m.safetensors"), in).ok());
  absl::StatusOr<NamedTensors> out = load_safetensors(path("m.safetensors"));
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_EQ(out->size(), in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    SCOPED_TRACE(in[i].first);
    EXPECT_EQ((*out)[i].second.shape(), in[i].second.shape());
    EXPECT_EQ((*out)[i].second.dtype(), in[i].second.dtype());
    EXPECT_EQ(testing::values((*out)[i].second), testing::values(in[i].second));
  }
  EXPECT_EQ((*out)[0].second.dim(), 0);
  EXPECT_FLOAT_EQ((*out)[0].second.item<float>(), 2.5f);
  EXPECT_EQ((*out)[3].second.item<int64_t>(), 41);
}

TEST_F(SafetensorsTest, NonContiguousTensorsAreWrittenContiguous) {
  Tensor base = testing::random_tensor({4, 6}, 1);
  NamedTensors in = {
      {"strided", testing::non_contiguous(base)},
      {"transposed", base.t()},
      {"sliced", base.slice(1, 1, 6, 2)},
      {"expanded", from_vector<float>({1, 2}, {1, 2}).expand({3, 2})},
      {"int_transposed", arange(0, 12, 1, kInt32).reshape({3, 4}).t()},
      {"offset_view", base.select(0, 2)},
  };
  ASSERT_FALSE(in[1].second.is_contiguous());
  ASSERT_TRUE(save_safetensors(path("m.safetensors"), in).ok());
  absl::StatusOr<NamedTensors> out = load_safetensors(path("m.safetensors"));
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_EQ(out->size(), in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    SCOPED_TRACE(in[i].first);
    EXPECT_EQ((*out)[i].second.shape(), in[i].second.shape());
    EXPECT_EQ(testing::values((*out)[i].second), testing::values(in[i].second));
  }
}

TEST_F(SafetensorsTest, MetadataRoundTrips) {
  const std::map<std::string, std::string> metadata = {
      {"format", "pt"}, {"step", "1000"}, {"note", "unicode \u00fc \u2713, \"quotes\"\n"}, {"empty", ""}};
  ASSERT_TRUE(save_safetensors(path("m.safetensors"), {{"w", ones({2})}}, metadata).ok());
  absl::StatusOr<std::map<std::string, std::string>> got = load_safetensors_metadata(path("m.safetensors"));
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, metadata);
  EXPECT_TRUE(load_safetensors(path("m.safetensors")).ok());

  ASSERT_TRUE(save_safetensors(path("plain.safetensors"), {{"w", ones({2})}}).ok());
  got = load_safetensors_metadata(path("plain.safetensors"));
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_TRUE(got->empty());
  const Bytes plain = read_bytes(path("plain.safetensors"));
  const std::string header(plain.begin() + 8, plain.begin() + 8 + u64_le(plain.data()));
  EXPECT_EQ(header.find("__metadata__"), std::string::npos);
}

TEST_F(SafetensorsTest, EmptyListRoundTrips) {
  ASSERT_TRUE(save_safetensors(path("m.safetensors"), {}).ok());
  const Bytes b = read_bytes(path("m.safetensors"));
  ASSERT_EQ(b.size(), 16u);  // 8-byte length + "{}" padded to 8
  absl::StatusOr<NamedTensors> out = load_safetensors(path("m.safetensors"));
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_TRUE(out->empty());
}

// ---- the format, byte for byte ----

// As another tool writes it: keys out of data order, a 0-d tensor, an empty
// tensor, whitespace in the JSON, and values spelled out as little-endian bytes.
TEST_F(SafetensorsTest, LoadsAFileWrittenByHandFollowingTheSpec) {
  const std::string header =
      "{\"__metadata__\": {\"format\": \"pt\"},\n"
      " \"b\": {\"dtype\": \"I64\", \"shape\": [2], \"data_offsets\": [16, 32]},\n"
      " \"a\": {\"dtype\": \"F32\", \"shape\": [2, 2], \"data_offsets\": [0, 16]},\n"
      " \"f\": {\"dtype\": \"I32\", \"shape\": [0, 3], \"data_offsets\": [42, 42]},\n"
      " \"c\": {\"data_offsets\": [32, 38], \"shape\": [3], \"dtype\": \"BF16\"},\n"
      " \"d\": {\"dtype\": \"BOOL\", \"shape\": [2], \"data_offsets\": [38, 40]},\n"
      " \"e\": {\"dtype\": \"F16\", \"shape\": [], \"data_offsets\": [40, 42]}}";
  const Bytes data = {
      0x00, 0x00, 0x80, 0x3f, 0x00, 0x00, 0x00, 0xc0, 0x00, 0x00, 0x00, 0x3f, 0x00, 0x00, 0x40, 0x40,  // a: 1 -2 .5 3
      0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,  // b: -1 258
      0x80, 0x3f, 0xc0, 0xbf, 0x80, 0x3e,                                                              // c: 1 -1.5 .25
      0x01, 0x00,                                                                                      // d: true false
      0x00, 0xc0,                                                                                      // e: -2
  };
  for (bool pad : {true, false}) {
    SCOPED_TRACE(pad ? "header padded with spaces" : "header not padded");
    write_bytes(path("hand.safetensors"), make_file(header, data, pad));
    absl::StatusOr<NamedTensors> out = load_safetensors(path("hand.safetensors"));
    ASSERT_TRUE(out.ok()) << out.status();
    ASSERT_EQ(out->size(), 6u);
    const std::vector<std::string> order = {"a", "b", "c", "d", "e", "f"};  // by data offset
    for (size_t i = 0; i < order.size(); ++i) EXPECT_EQ((*out)[i].first, order[i]);
    const NamedTensors& t = *out;
    EXPECT_EQ(t[0].second.shape(), Shape({2, 2}));
    EXPECT_EQ(t[0].second.to_vector<float>(), (std::vector<float>{1, -2, 0.5, 3}));
    EXPECT_EQ(t[1].second.to_vector<int64_t>(), (std::vector<int64_t>{-1, 258}));
    EXPECT_EQ(t[2].second.dtype(), kBFloat16);
    EXPECT_EQ(t[2].second.to_vector<float>(), (std::vector<float>{1, -1.5, 0.25}));
    EXPECT_EQ(t[3].second.dtype(), kBool);
    EXPECT_EQ(t[3].second.to_vector<int32_t>(), (std::vector<int32_t>{1, 0}));
    EXPECT_EQ(t[4].second.dtype(), kFloat16);
    EXPECT_EQ(t[4].second.dim(), 0);
    EXPECT_EQ(t[4].second.item<float>(), -2.0f);
    EXPECT_EQ(t[5].second.shape(), Shape({0, 3}));
    EXPECT_EQ(t[5].second.dtype(), kInt32);
    absl::StatusOr<std::map<std::string, std::string>> meta = load_safetensors_metadata(path("hand.safetensors"));
    ASSERT_TRUE(meta.ok()) << meta.status();
    EXPECT_EQ(*meta, (std::map<std::string, std::string>{{"format", "pt"}}));
  }
}

TEST_F(SafetensorsTest, SavedBytesFollowTheSpec) {
  const std::vector<float> w = {1.5f, -2.0f, 0.25f, 3.0f, -0.0f, 100.0f};
  const std::vector<int64_t> i = {-5, int64_t{1} << 33};
  ASSERT_TRUE(save_safetensors(path("m.safetensors"),
                               {{"w", from_vector<float>(w, {2, 3})}, {"i", from_vector<int64_t>(i, {2})}},
                               {{"k", "v"}})
                  .ok());
  const Bytes b = read_bytes(path("m.safetensors"));
  ASSERT_GE(b.size(), 8u);
  const uint64_t n = u64_le(b.data());
  EXPECT_EQ((8 + n) % 8, 0u);                // data section 8-byte aligned
  ASSERT_EQ(b.size(), 8 + n + 24 + 16);      // header + 6 f32 + 2 i64, nothing else
  const std::string header(b.begin() + 8, b.begin() + 8 + n);
  EXPECT_EQ(header.front(), '{');
  const size_t close = header.rfind('}');
  EXPECT_EQ(header.find_first_not_of(' ', close + 1), std::string::npos);  // padding is spaces only
  const nlohmann::json j = nlohmann::json::parse(header);
  ASSERT_TRUE(j.is_object());
  EXPECT_EQ(j.size(), 3u);
  EXPECT_EQ(j["__metadata__"], nlohmann::json({{"k", "v"}}));
  EXPECT_EQ(j["w"]["dtype"], "F32");
  EXPECT_EQ(j["w"]["shape"], nlohmann::json({2, 3}));
  EXPECT_EQ(j["w"]["data_offsets"], nlohmann::json({0, 24}));
  EXPECT_EQ(j["i"]["dtype"], "I64");
  EXPECT_EQ(j["i"]["shape"], nlohmann::json({2}));
  EXPECT_EQ(j["i"]["data_offsets"], nlohmann::json({24, 40}));
  const uint8_t* data = b.data() + 8 + n;
  for (size_t k = 0; k < w.size(); ++k) {  // little-endian IEEE bits
    uint32_t bits = 0;
    for (int byte = 0; byte < 4; ++byte) bits |= static_cast<uint32_t>(data[4 * k + byte]) << (8 * byte);
    EXPECT_EQ(bits, std::bit_cast<uint32_t>(w[k])) << k;
  }
  for (size_t k = 0; k < i.size(); ++k) EXPECT_EQ(static_cast<int64_t>(u64_le(data + 24 + 8 * k)), i[k]) << k;
}

// ---- atomic save ----

TEST_F(SafetensorsTest, SaveReplacesAnExistingFileAndLeavesNoTemporary) {
  ASSERT_TRUE(save_safetensors(path("m.safetensors"), {{"w", full({3}, 1.0)}}).ok());
  ASSERT_TRUE(save_safetensors(path("m.safetensors"), {{"w", full({2}, 2.0)}, {"b", zeros({1})}}).ok());
  absl::StatusOr<NamedTensors> out = load_safetensors(path("m.safetensors"));
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_EQ(out->size(), 2u);
  EXPECT_EQ((*out)[0].second.to_vector<float>(), (std::vector<float>{2, 2}));
  EXPECT_EQ(files(), (std::vector<std::string>{"m.safetensors"}));
}

mode_t permissions(const std::string& path) {
  struct stat st {};
  EXPECT_EQ(::stat(path.c_str(), &st), 0) << path;
  return st.st_mode & 07777;
}

// NOTE [ Writing a file atomically ] (src/core/atomic_file.cpp): a new file gets 0666 & ~umask, as a
// plain creation would; a replaced file keeps its permission bits whatever
// the umask (a 0600 file must not become world-readable when saved again).
TEST_F(SafetensorsTest, SavedFilesGetThePermissionsOfAPlainCreation) {
  const std::string p = path("m.safetensors");
  const mode_t old_umask = ::umask(0);
  for (mode_t mask : {mode_t{022}, mode_t{077}, mode_t{002}, mode_t{0}}) {
    ::umask(mask);
    ::unlink(p.c_str());
    const absl::Status s = save_safetensors(p, {{"w", ones({2})}});
    const std::string plain = path("plain");
    ::unlink(plain.c_str());
    std::ofstream(plain).put('x');   // what a plain creation gives under this umask
    ::umask(old_umask);
    ASSERT_TRUE(s.ok()) << s;
    const std::string where = absl::StrFormat("umask %03o", mask);
    EXPECT_EQ(permissions(p), 0666 & ~mask) << where;
    EXPECT_EQ(permissions(p), permissions(plain)) << where;
    for (mode_t kept : {mode_t{0600}, mode_t{0640}, mode_t{0664}}) {
      ASSERT_EQ(::chmod(p.c_str(), kept), 0);
      ::umask(mask);
      const absl::Status again = save_safetensors(p, {{"w", zeros({2})}});
      ::umask(old_umask);
      ASSERT_TRUE(again.ok()) << again;
      EXPECT_EQ(permissions(p), kept) << where << absl::StrFormat(", replacing a %04o file", kept);
    }
  }
  ::umask(old_umask);
  EXPECT_EQ(files(), (std::vector<std::string>{"m.safetensors", "plain"}));
}

TEST_F(SafetensorsTest, SaveIntoAMissingDirectoryFailsNamingThePath) {
  const std::string p = path("no_such_dir/m.safetensors");
  expect_status(save_safetensors(p, {{"w", ones({2})}}), StatusCode::kNotFound,
                {"save_safetensors", p, "No such file or directory"});
  EXPECT_TRUE(files().empty());
}

// Refuses host access after `allowed` calls, as capture does.
class RefusingObserver : public StepObserver {
 public:
  explicit RefusingObserver(int allowed) : allowed_(allowed) {}
  bool on_launch(const LaunchRecord&) override { return true; }
  void on_host_access(const char* op) override {
    if (allowed_-- <= 0) throw_error(StatusCode::kFailedPrecondition, absl::StrCat(op, ": refused during capture"));
  }

 private:
  int allowed_;
};

TEST_F(SafetensorsTest, FailedSaveLeavesThePreviousFileIntact) {
  const std::string p = path("m.safetensors");
  ASSERT_TRUE(save_safetensors(p, {{"w", full({4}, 1.0)}, {"b", full({2}, 3.0)}}).ok());
  const Bytes before = read_bytes(p);
  NamedTensors next = {{"w", full({4}, 5.0)}, {"b", full({2}, 6.0)}};
  RefusingObserver refuse(/*allowed=*/1);  // the first tensor is written, the second is refused
  absl::Status s;
  {
    StepObserverScope observe(&refuse);
    s = save_safetensors(p, next);
  }
  expect_status(s, StatusCode::kFailedPrecondition, {"save_safetensors", p, "\"b\"", "refused"});
  EXPECT_EQ(read_bytes(p), before);
  EXPECT_EQ(files(), (std::vector<std::string>{"m.safetensors"}));  // the temporary is gone
}

// A directory is refused before anything is written (a failed rename is
// tests/core/atomic_file_test.cpp's).
TEST_F(SafetensorsTest, SaveOverADirectoryIsRefusedBeforeWriting) {
  const std::string p = path("taken");
  std::filesystem::create_directories(dir_ / "taken" / "inside");
  expect_status(save_safetensors(p, {{"w", ones({2})}}), StatusCode::kFailedPrecondition,
                {"save_safetensors", p, "Is a directory"});
  EXPECT_EQ(files(), (std::vector<std::string>{"taken"}));
  EXPECT_TRUE(std::filesystem::is_directory(dir_ / "taken" / "inside"));
}

// A write that fails mid-save (here: the file-size limit, EFBIG, as a full
// disk gives ENOSPC) reaches the caller, keeps the previous file and removes
// the temporary.
TEST_F(SafetensorsTest, AWriteThatFailsMidSaveReachesTheCaller) {
  const std::string p = path("m.safetensors");
  ASSERT_TRUE(save_safetensors(p, {{"w", full({4}, 1.0)}}).ok());
  const Bytes before = read_bytes(p);
  absl::Status s;
  {
    testing::FileSizeLimit limit(4096);   // bytes per file: the header fits, the data does not
    s = save_safetensors(p, {{"w", full({1 << 16}, 2.0)}});
  }
  expect_status(s, StatusCode::kOutOfRange, {"save_safetensors", "cannot write", ".tmp.", "File too large"});
  EXPECT_EQ(read_bytes(p), before);
  EXPECT_EQ(files(), (std::vector<std::string>{"m.safetensors"}));
}

// /dev/full, a fifo and other nodes that are not files are never replaced
// by a save (its rename would replace the node, even as root).
TEST_F(SafetensorsTest, SaveOverADeviceOrFifoIsRefused) {
  if (::access("/dev/full", F_OK) == 0) {
    expect_status(save_safetensors("/dev/full", {{"w", ones({2})}}), StatusCode::kFailedPrecondition,
                  {"save_safetensors", "/dev/full", "not a regular file"});
    struct stat st {};
    ASSERT_EQ(::stat("/dev/full", &st), 0);
    EXPECT_TRUE(S_ISCHR(st.st_mode));
  }
  ASSERT_EQ(::mkfifo(path("fifo").c_str(), 0600), 0);
  expect_status(save_safetensors(path("fifo"), {{"w", ones({2})}}), StatusCode::kFailedPrecondition,
                {path("fifo"), "not a regular file"});
  EXPECT_EQ(files(), (std::vector<std::string>{"fifo"}));
}

// A link is followed as torch.save's plain open would follow it: the file
// it names is replaced, the link stays.
TEST_F(SafetensorsTest, SaveThroughALinkReplacesTheFileItNamesAndKeepsTheLink) {
  ASSERT_TRUE(save_safetensors(path("step_1.safetensors"), {{"w", full({2}, 1.0)}}).ok());
  std::filesystem::create_symlink("step_1.safetensors", dir_ / "latest.safetensors");
  ASSERT_TRUE(save_safetensors(path("latest.safetensors"), {{"w", full({2}, 2.0)}}).ok());
  EXPECT_TRUE(std::filesystem::is_symlink(dir_ / "latest.safetensors"));
  absl::StatusOr<NamedTensors> out = load_safetensors(path("step_1.safetensors"));
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ((*out)[0].second.to_vector<float>(), (std::vector<float>{2, 2}));
  EXPECT_EQ(files(), (std::vector<std::string>{"latest.safetensors", "step_1.safetensors"}));
}

// A file name of NAME_MAX bytes (255) is valid: it saves (through a
// shortened temporary, NOTE [ Temporaries of long names ] in
// src/core/atomic_file.cpp), loads, and leaves nothing else behind.
TEST_F(SafetensorsTest, AFileNameOfNameMaxBytesSavesAndLoads) {
  const long max = ::pathconf(::testing::TempDir().c_str(), _PC_NAME_MAX);
  const std::string name = std::string((max > 0 ? max : 255) - 12, 'a') + ".safetensors";
  absl::Status st = save_safetensors(path(name), {{"w", full({3}, 2.0)}});
  ASSERT_TRUE(st.ok()) << st;
  absl::StatusOr<NamedTensors> out = load_safetensors(path(name));
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ((*out)[0].second.to_vector<float>(), (std::vector<float>{2, 2, 2}));
  EXPECT_EQ(files(), std::vector<std::string>{name});
}

// NOTE [ Stale temporaries ] (src/core/atomic_file.cpp): each save and load of a path removes the
// temporaries of that path left by dead processes, and only those.
TEST_F(SafetensorsTest, SavesAndLoadsRemoveStaleTemporariesOfDeadProcessesOnly) {
  const std::string p = path("m.safetensors");
  ASSERT_TRUE(save_safetensors(p, {{"w", full({3}, 1.0)}}).ok());
  const std::string dead = absl::StrCat(dead_pid()), self = absl::StrCat(::getpid());
  const std::vector<std::string> kept = {
      absl::StrCat("m.safetensors.tmp.", self, ".999999"),   // a live pid: ours, another save's counter
      "m.safetensors.tmp.1.0",                                // pid 1 is alive
      absl::StrCat("m.safetensors.tmp.", dead, ".0.bak"),    // not the exact pattern
      absl::StrCat("m.safetensors.tmp.", dead, "."),
      absl::StrCat("m.safetensors.tmp.x", dead, ".0"),
      absl::StrCat("other.safetensors.tmp.", dead, ".0"),   // another path's
      absl::StrCat("m.safetensorsX.tmp.", dead, ".0")};
  auto plant = [&](const std::vector<std::string>& names) {
    for (const std::string& n : names) write_bytes(path(n), {1, 2, 3});
  };
  plant(kept);
  plant({absl::StrCat("m.safetensors.tmp.", dead, ".0"), absl::StrCat("m.safetensors.tmp.", dead, ".17")});
  std::vector<std::string> expected = kept;
  expected.push_back("m.safetensors");
  std::sort(expected.begin(), expected.end());

  ASSERT_TRUE(load_safetensors(p).ok());
  EXPECT_EQ(files(), expected);
  plant({absl::StrCat("m.safetensors.tmp.", dead, ".3")});
  ASSERT_TRUE(load_safetensors_metadata(p).ok());
  EXPECT_EQ(files(), expected);
  plant({absl::StrCat("m.safetensors.tmp.", dead, ".4")});
  NamedTensors targets = {{"w", zeros({3})}};
  ASSERT_TRUE(load_into(p, targets).ok());
  EXPECT_EQ(files(), expected);
  plant({absl::StrCat("m.safetensors.tmp.", dead, ".5")});
  ASSERT_TRUE(save_safetensors(p, {{"w", full({3}, 2.0)}}).ok());
  EXPECT_EQ(files(), expected);
  // A load of a path that does not exist (yet) still cleans up after a killed first save.
  plant({absl::StrCat("new.safetensors.tmp.", dead, ".0")});
  EXPECT_EQ(load_safetensors(path("new.safetensors")).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(files(), expected);
}

// kill -9 in the middle of saves: the path always holds a whole file (the
// previous one or the new one), the killed save's temporary stays behind,
// and the next save removes it.
TEST_F(SafetensorsTest, ASaveKilledWithSigkillLeavesAWholeFileAndATemporaryTheNextSaveRemoves) {
  constexpr int kKills = 10;
  constexpr int64_t kFloats = int64_t{1} << 20;   // 4 MiB a save: long enough to be caught mid-write
  const std::string p = path("m.safetensors");
  ASSERT_TRUE(save_safetensors(p, {{"w", full({kFloats}, 1.0)}}).ok());
  const NamedTensors next = {{"w", full({kFloats}, 2.0)}};
  int left_behind = 0;
  for (int k = 0; k < kKills; ++k) {
    const pid_t child = ::fork();
    if (child == 0) {
      for (;;) (void)save_safetensors(p, next);   // until killed
    }
    ASSERT_GT(child, 0);
    const std::string prefix = absl::StrCat("m.safetensors.tmp.", child, ".");
    auto has_temporary = [&] {
      for (const std::string& f : files()) {
        if (f.rfind(prefix, 0) == 0) return true;
      }
      return false;
    };
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (!has_temporary() && std::chrono::steady_clock::now() < deadline) ::usleep(200);
    ::kill(child, SIGKILL);
    int status = 0;
    ASSERT_EQ(::waitpid(child, &status, 0), child);
    ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
    left_behind += has_temporary();
    absl::StatusOr<NamedTensors> loaded = load_safetensors(p);   // also removes the temporary
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    const std::vector<float> v = (*loaded)[0].second.to_vector<float>();
    EXPECT_TRUE(std::all_of(v.begin(), v.end(), [&](float x) { return x == v[0]; }) && (v[0] == 1 || v[0] == 2))
        << "kill " << k << ": a mix of old and new values";
    EXPECT_EQ(files(), (std::vector<std::string>{"m.safetensors"})) << "kill " << k;
  }
  EXPECT_GT(left_behind, kKills / 2) << "the kills did not land mid-save";
  std::printf("[ figures  ] %d of %d kill -9 during a save left a temporary; every load saw a whole file\n",
              left_behind, kKills);
}

TEST_F(SafetensorsTest, SaveRejectsBadNames) {
  const std::string p = path("m.safetensors");
  expect_status(save_safetensors(p, {{"w", ones({2})}, {"b", ones({1})}, {"w", zeros({2})}}),
                StatusCode::kInvalidArgument, {"save_safetensors", p, "\"w\"", "twice", "0 and 2"});
  expect_status(save_safetensors(p, {{"w", ones({2})}, {"", ones({1})}}), StatusCode::kInvalidArgument,
                {"tensor 1", "empty name"});
  expect_status(save_safetensors(p, {{"__metadata__", ones({1})}}), StatusCode::kInvalidArgument,
                {"\"__metadata__\"", "reserved"});
  expect_status(save_safetensors(p, {{"w", Tensor()}}), StatusCode::kInvalidArgument, {"\"w\"", "undefined"});
  expect_status(save_safetensors(p, {{"bad\xff", ones({1})}}), StatusCode::kInvalidArgument, {"UTF-8"});
  EXPECT_TRUE(files().empty());
}

// A header longer than a load accepts (100 MB) or holding more metadata
// keys is refused before anything is written: no file, no temporary.
TEST_F(SafetensorsTest, SaveRefusesAHeaderALoadWouldRefuse) {
  const std::string p = path("m.safetensors");
  expect_status(save_safetensors(p, {{"w", ones({2})}}, {{"notes", std::string(100'000'000, 'a')}}),
                StatusCode::kInvalidArgument, {"save_safetensors", p, "header would be", "100000000 bytes"});
  EXPECT_TRUE(files().empty());
  std::map<std::string, std::string> many;
  for (int i = 0; i <= 100000; ++i) many[absl::StrCat("k", i)] = "";
  expect_status(save_safetensors(p, {{"w", ones({2})}}, many), StatusCode::kInvalidArgument,
                {"save_safetensors", p, "100001 metadata keys"});
  EXPECT_TRUE(files().empty());
}

// ---- load_into ----

TEST_F(SafetensorsTest, LoadIntoCopiesIntoTheTargetsStorage) {
  const Tensor w_saved = testing::random_tensor({3, 4}, 7);
  const Tensor b_saved = testing::random_tensor({4}, 8);
  ASSERT_TRUE(save_safetensors(path("m.safetensors"),
                               {{"w", w_saved}, {"b", b_saved}, {"step", scalar_tensor(12, kInt64)}})
                  .ok());
  Tensor w = zeros({3, 4}).requires_grad_();
  Tensor b_base = zeros({4, 2});
  Tensor b = b_base.select(1, 0);  // a strided view: written in place through its base
  Tensor step = scalar_tensor(0, kInt64);
  void* const w_ptr = w.data_ptr();
  void* const b_ptr = b.data_ptr();
  const uint32_t w_version = w.version();
  ASSERT_TRUE(load_into(path("m.safetensors"), {{"step", step}, {"w", w}, {"b", b}}).ok());
  EXPECT_EQ(w.data_ptr(), w_ptr);
  EXPECT_EQ(b.data_ptr(), b_ptr);
  EXPECT_GT(w.version(), w_version);
  EXPECT_TRUE(w.requires_grad());
  EXPECT_TRUE(w.is_leaf());
  EXPECT_TRUE(GradMode::is_enabled());
  EXPECT_EQ(raw_bytes(w), raw_bytes(w_saved));
  EXPECT_EQ(raw_bytes(b), raw_bytes(b_saved));
  EXPECT_EQ(testing::values(b_base.select(1, 1)), std::vector<double>(4, 0.0));
  EXPECT_EQ(step.item<int64_t>(), 12);
}

TEST_F(SafetensorsTest, LoadIntoIsStrictAndTouchesNoTargetOnError) {
  const std::string p = path("m.safetensors");
  ASSERT_TRUE(save_safetensors(p, {{"w", full({2, 2}, 1.0)}, {"b", full({2}, 2.0)}}).ok());
  Tensor w = full({2, 2}, 7.0);
  Tensor b = full({2}, 7.0);
  auto untouched = [&] {
    EXPECT_EQ(testing::values(w), std::vector<double>(4, 7.0));
    EXPECT_EQ(testing::values(b), std::vector<double>(2, 7.0));
  };
  expect_status(load_into(p, {{"w", w}, {"b", b}, {"c", zeros({3})}}), StatusCode::kNotFound,
                {"load_into", p, "\"c\"", "not in the file"});
  untouched();
  expect_status(load_into(p, {{"w", w}}), StatusCode::kInvalidArgument, {p, "\"b\"", "no target", "strict"});
  untouched();
  expect_status(load_into(p, {{"w", w}, {"bias", b}}), StatusCode::kNotFound, {"\"bias\"", "also holds", "\"b\""});
  untouched();
  expect_status(load_into(p, {{"w", zeros({4})}, {"b", b}}), StatusCode::kInvalidArgument,
                {p, "\"w\"", "[2, 2]", "[4]"});
  untouched();
  expect_status(load_into(p, {{"w", zeros({2, 2}, kFloat16)}, {"b", b}}), StatusCode::kInvalidArgument,
                {p, "\"w\"", "f32", "f16"});
  untouched();
  expect_status(load_into(p, {{"w", w}, {"b", b}, {"w", w}}), StatusCode::kInvalidArgument, {"\"w\"", "twice"});
  untouched();
  expect_status(load_into(p, {{"w", full({1, 2}, 7.0).expand({2, 2})}, {"b", b}}), StatusCode::kInvalidArgument,
                {"\"w\"", "broadcast"});
  untouched();
  expect_status(load_into(path("missing.safetensors"), {{"w", w}}), StatusCode::kNotFound,
                {"load_into", "missing.safetensors", "No such file"});
  untouched();
}

// ---- malformed files ----

std::string entry(const std::string& name, const std::string& dtype, const std::string& shape, uint64_t begin,
                  uint64_t end) {
  return absl::StrCat("\"", name, "\":{\"dtype\":\"", dtype, "\",\"shape\":", shape, ",\"data_offsets\":[", begin,
                      ",", end, "]}");
}

struct MalformedCase {
  std::string what;
  Bytes file;
  StatusCode code;
  std::vector<std::string> parts;
};

std::vector<MalformedCase> malformed_cases() {
  const Bytes eight(8, 0);
  // StrCat, not "{" + std::string&&: GCC 12 warns -Wrestrict on that operator+ (a false positive).
  const Bytes valid = make_file(absl::StrCat("{", entry("w", "F32", "[2]", 0, 8), "}"), eight);
  Bytes cut = valid;
  cut.resize(cut.size() - 3);
  Bytes long_header;
  append_u64_le(long_header, 1000);
  long_header.resize(28, ' ');
  Bytes huge_header;
  append_u64_le(huge_header, (uint64_t{1} << 62) + 5);
  huge_header.resize(64, ' ');
  Bytes trailing = valid;
  trailing.insert(trailing.end(), 4, 0);
  std::string deep = "{\"__metadata__\":{\"k\":";
  for (int i = 0; i < 200; ++i) deep += "[";
  for (int i = 0; i < 200; ++i) deep += "]";
  deep += "}}";
  // Bytes after a NUL went unread (nlohmann stops there as at the end of the input).
  const Bytes nul = make_file(absl::StrCat("{", entry("w", "F32", "[2]", 0, 8), "}", std::string("\0 garbage", 9)),
                              eight);
  auto one = [&](const std::string& body, const Bytes& data) { return make_file("{" + body + "}", data); };
  const StatusCode bad = StatusCode::kInvalidArgument;
  return {
      {"empty file", {}, StatusCode::kDataLoss, {"0 bytes", "8-byte"}},
      {"shorter than 8 bytes", {1, 2, 3, 4, 5}, StatusCode::kDataLoss, {"5 bytes", "8-byte"}},
      {"header longer than the file", long_header, StatusCode::kDataLoss, {"header length 1000", "past the end"}},
      {"absurd header length", huge_header, bad, {"exceeds", "100000000"}},
      {"data cut short", cut, StatusCode::kDataLoss, {"\"w\"", "[0, 8]", "5-byte data section", "truncated"}},
      {"invalid JSON", make_file("{\"w\": {\"dtype\": \"F32\",, }", eight), bad, {"not valid JSON", "header byte"}},
      {"invalid UTF-8", one("\"w\xff\":{}", {}), bad, {"not valid JSON"}},
      {"header not an object", make_file("[1, 2]", {}), bad, {"array", "not a JSON object"}},
      {"entry not an object", one("\"w\":3", {}), bad, {"\"w\"", "number", "not an object"}},
      {"missing dtype", one("\"w\":{\"shape\":[2],\"data_offsets\":[0,8]}", eight), bad, {"\"w\"", "no \"dtype\""}},
      {"missing shape", one("\"w\":{\"dtype\":\"F32\",\"data_offsets\":[0,8]}", eight), bad, {"\"w\"", "no \"shape\""}},
      {"missing offsets", one("\"w\":{\"dtype\":\"F32\",\"shape\":[2]}", eight), bad, {"\"w\"", "no \"data_offsets\""}},
      {"dtype not a string", one("\"w\":{\"dtype\":5,\"shape\":[2],\"data_offsets\":[0,8]}", eight), bad,
       {"\"w\"", "\"dtype\" is", "number"}},
      {"unknown dtype", one(entry("w", "F33", "[2]", 0, 8), eight), bad, {"\"w\"", "unknown dtype", "F33"}},
      {"dtype encore does not store", one(entry("w", "F64", "[1]", 0, 8), eight), StatusCode::kUnimplemented,
       {"\"w\"", "F64"}},
      {"shape not an array", one(entry("w", "F32", "\"2\"", 0, 8), eight), bad, {"\"w\"", "\"shape\"", "string"}},
      {"negative dim", one(entry("w", "F32", "[-2]", 0, 8), eight), bad, {"\"w\"", "dim 0", "-2", "non-negative"}},
      {"fractional dim", one(entry("w", "F32", "[1, 2.0]", 0, 8), eight), bad, {"\"w\"", "dim 1", "non-negative"}},
      {"too many dims", one(entry("w", "F32", "[1,1,1,1,1,1,1,1,2]", 0, 8), eight), StatusCode::kUnimplemented,
       {"\"w\"", "9 dims"}},
      {"offsets not a pair", one("\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0]}", eight), bad,
       {"\"w\"", "[begin, end]"}},
      {"negative offset", one("\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[-1,7]}", eight), bad,
       {"\"w\"", "[begin, end]"}},
      {"offsets reversed", one(entry("w", "F32", "[0]", 8, 0), eight), bad, {"\"w\"", "[8, 0]", "end before"}},
      {"shape does not match the bytes", one(entry("w", "F32", "[2, 3]", 0, 8), eight), bad,
       {"\"w\"", "[2, 3]", "24 bytes", "[0, 8]"}},
      {"shape overflows", one(entry("w", "F32", "[4294967296, 4294967296, 4]", 0, 8), eight), bad,
       {"\"w\"", "overflows"}},
      {"offsets out of range", one(entry("w", "F32", "[2]", 8, 16), eight), StatusCode::kDataLoss,
       {"\"w\"", "[8, 16]", "past the end"}},
      {"overlapping offsets", one(entry("a", "F32", "[2]", 0, 8) + "," + entry("b", "F32", "[2]", 4, 12), Bytes(12)),
       bad, {"\"b\"", "[4, 12]", "overlap", "\"a\""}},
      {"hole between tensors", one(entry("a", "F32", "[2]", 0, 8) + "," + entry("b", "F32", "[2]", 12, 20), Bytes(20)),
       bad, {"\"b\"", "[8, 12)", "no holes"}},
      {"trailing bytes", trailing, bad, {"12 bytes", "only the first 8", "uncovered"}},
      {"duplicate names", one(entry("w", "F32", "[2]", 0, 8) + "," + entry("w", "F32", "[2]", 0, 8), eight), bad,
       {"\"w\"", "twice", "duplicate"}},
      {"duplicate field", one("\"w\":{\"dtype\":\"F32\",\"dtype\":\"I32\",\"shape\":[2],\"data_offsets\":[0,8]}", eight),
       bad, {"\"dtype\"", "twice"}},
      {"metadata not strings", one("\"__metadata__\":{\"step\":3}," + entry("w", "F32", "[2]", 0, 8), eight), bad,
       {"__metadata__", "\"step\"", "number"}},
      {"metadata not an object", one("\"__metadata__\":[]," + entry("w", "F32", "[2]", 0, 8), eight), bad,
       {"__metadata__", "array"}},
      {"bool byte not 0 or 1", one(entry("m", "BOOL", "[2]", 0, 2), {1, 2}), bad, {"\"m\"", "element 1", "0x02"}},
      {"deep nesting", make_file(deep, {}), bad, {"deeper"}},
      {"NUL byte in the header", nul, bad, {"NUL byte", "header byte 55", "file offset 62"}},
      {"empty tensor name", one(entry("", "F32", "[2]", 0, 8), eight), bad, {"tensor \"\"", "name is empty"}},
  };
}

TEST_F(SafetensorsTest, MalformedFilesBecomeStatusesNamingTheProblem) {
  const std::string p = path("bad.safetensors");
  for (const MalformedCase& c : malformed_cases()) {
    SCOPED_TRACE(c.what);
    write_bytes(p, c.file);
    std::vector<std::string> parts = c.parts;
    parts.push_back(p);
    absl::StatusOr<NamedTensors> loaded = load_safetensors(p);
    expect_status(loaded.status(), c.code, parts);
    // load_into validates the same way and leaves its target alone.
    Tensor target = full({2}, 9.0);
    expect_status(load_into(p, {{"w", target}}), c.code, c.parts);
    EXPECT_EQ(testing::values(target), std::vector<double>(2, 9.0));
  }
}

// NOTE [ Linear header parsing ]: a header of many entries loads in time
// linear in its size. Size-driven, not timed: 200,000 entries took minutes
// with the quadratic parse callback (60,000 took 28 s), and ctest's time
// limit is the generous bound; bench/ measures the speed.
// A header of n one-element f32 entries, and its file.
Bytes file_of_entries(int n) {
  std::string header = "{";
  for (int i = 0; i < n; ++i) {
    if (i > 0) header += ",";
    header += entry(absl::StrCat("t", i), "F32", "[1]", 4 * i, 4 * i + 4);
  }
  header += "}";
  return make_file(header, Bytes(4 * static_cast<size_t>(n), 0));
}

TEST_F(SafetensorsTest, AHeaderOfManyEntriesLoads) {
  constexpr int kEntries = 100000;   // the limit
  write_bytes(path("many.safetensors"), file_of_entries(kEntries));
  absl::StatusOr<NamedTensors> out = load_safetensors(path("many.safetensors"));
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->size(), static_cast<size_t>(kEntries));
}

TEST_F(SafetensorsTest, HeadersPastTheEntryLimitAreRefusedAndNotWritten) {
  // A header of a million entries is refused when the count passes the limit.
  write_bytes(path("huge.safetensors"), file_of_entries(1000000));
  expect_status(load_safetensors(path("huge.safetensors")).status(), StatusCode::kInvalidArgument,
                {"more than 100000 tensors", "Entry limit"});
  expect_status(load_safetensors_metadata(path("huge.safetensors")).status(), StatusCode::kInvalidArgument,
                {"more than 100000 tensors"});
  write_bytes(path("past.safetensors"), file_of_entries(100001));
  expect_status(load_safetensors(path("past.safetensors")).status(), StatusCode::kInvalidArgument,
                {"more than 100000 tensors"});
  NamedTensors too_many;
  for (int i = 0; i <= 100000; ++i) too_many.emplace_back(absl::StrCat("t", i), Tensor());
  expect_status(save_safetensors(path("out.safetensors"), too_many), StatusCode::kInvalidArgument,
                {"100001 tensors", "100000"});
  EXPECT_FALSE(std::filesystem::exists(path("out.safetensors")));
}

// Opening a fifo for reading waits for a writer: loads must refuse one at
// once. Should a load wait, the watchdog opens the fifo for writing after
// 2 s, so the test fails instead of hanging.
TEST_F(SafetensorsTest, LoadingAFifoIsRefusedWithoutWaiting) {
  const std::string p = path("fifo");
  ASSERT_EQ(::mkfifo(p.c_str(), 0600), 0);
  std::atomic<bool> done{false};
  std::thread watchdog([&] {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
    while (!done) {
      if (std::chrono::steady_clock::now() > deadline) {
        const int fd = ::open(p.c_str(), O_WRONLY | O_NONBLOCK);   // succeeds only while a reader waits
        if (fd >= 0) ::close(fd);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  });
  const auto start = std::chrono::steady_clock::now();
  const absl::Status loaded = load_safetensors(p).status();
  const absl::Status metadata = load_safetensors_metadata(p).status();
  const absl::Status into = load_into(p, {{"w", ones({2})}});
  const std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
  done = true;
  watchdog.join();
  expect_status(loaded, StatusCode::kInvalidArgument, {"load_safetensors", p, "not a regular file"});
  expect_status(metadata, StatusCode::kInvalidArgument, {"load_safetensors_metadata", p, "not a regular file"});
  expect_status(into, StatusCode::kInvalidArgument, {"load_into", p, "not a regular file"});
  EXPECT_LT(took.count(), 1.0);
}

// NOTE [ Header size ]: JSON whose DOM would outgrow the header many times
// over is refused by the SAX pass, naming the entry, before the DOM is built.
TEST_F(SafetensorsTest, HeadersOfMoreJsonValuesThanRealOnesAreRefused) {
  std::string arrays = "{\"x\":[";
  for (int i = 0; i < 100000; ++i) absl::StrAppend(&arrays, i > 0 ? "," : "", "[]");
  arrays += "]}";
  write_bytes(path("arrays.safetensors"), make_file(arrays, {}));
  expect_status(load_safetensors(path("arrays.safetensors")).status(), StatusCode::kInvalidArgument,
                {path("arrays.safetensors"), "tensor \"x\"", "more than 16 JSON values", "Header size"});
  std::string metadata = "{\"__metadata__\":{";
  for (int i = 0; i <= 100000; ++i) absl::StrAppend(&metadata, i > 0 ? "," : "", "\"k", i, "\":\"\"");
  metadata += "}}";
  write_bytes(path("metadata.safetensors"), make_file(metadata, {}));
  expect_status(load_safetensors_metadata(path("metadata.safetensors")).status(), StatusCode::kInvalidArgument,
                {path("metadata.safetensors"), "\"__metadata__\" holds more than 100000 values"});
  // A real entry with a small field encore does not know still loads.
  write_bytes(path("extra.safetensors"),
              make_file(R"({"w":{"dtype":"F32","shape":[1,1,1,1,1,1,1,2],"data_offsets":[0,8],"note":"x"}})",
                        Bytes(8, 0)));
  absl::StatusOr<NamedTensors> extra = load_safetensors(path("extra.safetensors"));
  ASSERT_TRUE(extra.ok()) << extra.status();
}

// Names and shapes from the header alone, in data order, F64 included;
// a malformed header is refused as load_safetensors refuses it.
TEST_F(SafetensorsTest, ShapesAreReadFromTheHeaderAlone) {
  const std::string p = path("m.safetensors");
  const std::string header =
      absl::StrCat("{", entry("b", "F64", "[1]", 24, 32), ",", entry("a", "I32", "[2, 3]", 0, 24), "}");
  write_bytes(p, make_file(header, Bytes(32, 0)));
  absl::StatusOr<std::vector<std::pair<std::string, Shape>>> shapes = load_safetensors_shapes(p);
  ASSERT_TRUE(shapes.ok()) << shapes.status();
  EXPECT_EQ(*shapes, (std::vector<std::pair<std::string, Shape>>{{"a", Shape{2, 3}}, {"b", Shape{1}}}));
  write_bytes(p, {1, 2, 3});
  expect_status(load_safetensors_shapes(p).status(), StatusCode::kDataLoss, {"load_safetensors_shapes", p, "3 bytes"});
}

TEST_F(SafetensorsTest, MissingFileAndDirectoryAreRefused) {
  expect_status(load_safetensors(path("nope.safetensors")).status(), StatusCode::kNotFound,
                {"load_safetensors", "nope.safetensors", "No such file"});
  expect_status(load_safetensors_metadata(path("nope.safetensors")).status(), StatusCode::kNotFound,
                {"nope.safetensors"});
  std::filesystem::create_directories(dir_ / "d");
  expect_status(load_safetensors(path("d")).status(), StatusCode::kInvalidArgument, {path("d"), "regular file"});
}

// Flips, overwrites and truncates bytes of a valid file: loading must return
// OK or a Status, never crash or read out of bounds (run under ASan to see).
TEST_F(SafetensorsTest, FuzzedFilesNeverCrash) {
  NamedTensors original = {{"w", testing::random_tensor({3, 4}, 3)},
                           {"h", testing::random_tensor({5}, 4).to(kBFloat16)},
                           {"m", from_vector<bool>({true, false, true})},
                           {"step", scalar_tensor(3, kInt64)},
                           {"none", zeros({0, 2}, kInt32)}};
  const std::string p = path("fuzz.safetensors");
  ASSERT_TRUE(save_safetensors(p, original, {{"format", "pt"}}).ok());
  const Bytes valid = read_bytes(p);
  const size_t header_end = 8 + u64_le(valid.data());
  std::mt19937 rng(1234);
  auto pick = [&](size_t n) { return std::uniform_int_distribution<size_t>(0, n - 1)(rng); };
  const std::string specials = "{}[],:\"0123456789- eE.\\";
  int ok = 0, refused = 0;
  for (int iter = 0; iter < 500; ++iter) {
    Bytes b = valid;
    const size_t edits = 1 + pick(4);
    for (size_t e = 0; e < edits; ++e) {
      const size_t pos = pick(4) == 0 ? pick(b.size()) : pick(std::min(b.size(), header_end));  // mostly header
      switch (pick(4)) {
        case 0: b[pos] ^= static_cast<uint8_t>(1u << pick(8)); break;
        case 1: b[pos] = static_cast<uint8_t>(specials[pick(specials.size())]); break;
        case 2: b[pos] = static_cast<uint8_t>(pick(256)); break;
        default: b.resize(pick(b.size() + 1)); break;
      }
      if (b.empty()) break;
    }
    write_bytes(p, b);
    absl::StatusOr<NamedTensors> out = load_safetensors(p);
    if (out.ok()) {
      ++ok;
      for (const auto& [name, t] : *out) EXPECT_TRUE(t.defined()) << name;
    } else {
      ++refused;
      EXPECT_TRUE(out.status().code() == StatusCode::kInvalidArgument ||
                  out.status().code() == StatusCode::kDataLoss ||
                  out.status().code() == StatusCode::kUnimplemented)
          << out.status();
    }
    NamedTensors targets;
    for (const auto& [name, t] : original) targets.emplace_back(name, zeros(t.shape(), t.dtype()));
    (void)load_into(p, targets);
  }
  EXPECT_GT(refused, 250);
  EXPECT_GT(ok, 0);  // data-byte flips still load
}

// ---- forgiving loads (LoadOptions) ----

TEST_F(SafetensorsTest, NonStrictLoadReportsMissingAndUnexpectedNames) {
  const std::string p = path("m.safetensors");
  ASSERT_TRUE(save_safetensors(p, {{"w", full({2}, 1.0)}, {"old.b", full({3}, 2.0)}}).ok());
  Tensor w = full({2}, 7.0), c = full({1}, 7.0);
  LoadReport r;
  absl::Status s = load_into(p, {{"w", w}, {"c", c}}, {.strict = false}, &r);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(testing::values(w), std::vector<double>(2, 1.0));
  EXPECT_EQ(testing::values(c), std::vector<double>(1, 7.0));   // missing: left as it was
  EXPECT_EQ(r.missing, std::vector<std::string>{"c"});
  EXPECT_EQ(r.unexpected, std::vector<std::string>{"old.b"});
  EXPECT_TRUE(r.converted.empty());
  // A shape mismatch is still refused, naming the tensor, and writes nothing.
  Tensor w3 = full({3}, 7.0);
  expect_status(load_into(p, {{"w", w3}}, {.strict = false}, &r), StatusCode::kInvalidArgument, {"\"w\"", "[3]"});
  EXPECT_EQ(testing::values(w3), std::vector<double>(3, 7.0));
}

TEST_F(SafetensorsTest, ConvertDtypesConvertsFloatsAndListsThem) {
  const std::string p = path("m.safetensors");
  Tensor src = from_vector<float>({1.5f, -2.25f, 3.0f});
  ASSERT_TRUE(save_safetensors(p, {{"a", src.to(kBFloat16)}, {"b", src}, {"i", from_vector<int32_t>({1, 2})}}).ok());
  Tensor a = zeros({3}), b = zeros({3}, kFloat16), i = zeros({2}, kInt64);
  // Without the option a dtype mismatch is refused, pointing at it.
  expect_status(load_into(p, {{"a", a}, {"b", b}, {"i", zeros({2}, kInt32)}}), StatusCode::kInvalidArgument,
                {"\"a\"", "bf16", "f32", "convert_dtypes"});
  LoadReport r;
  // Integers are never converted: still refused, naming the tensor.
  expect_status(load_into(p, {{"a", a}, {"b", b}, {"i", i}}, {.convert_dtypes = true}, &r),
                StatusCode::kInvalidArgument, {"\"i\"", "i32", "i64"});
  Tensor i32 = zeros({2}, kInt32);
  absl::Status s = load_into(p, {{"a", a}, {"b", b}, {"i", i32}}, {.convert_dtypes = true}, &r);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(testing::values(a), (std::vector<double>{1.5, -2.25, 3.0}));
  EXPECT_EQ(testing::values(b), (std::vector<double>{1.5, -2.25, 3.0}));
  EXPECT_EQ(r.converted, (std::vector<std::string>{"a: bf16 -> f32", "b: f32 -> f16"}));
}

TEST_F(SafetensorsTest, F64FilesLoadIntoFloatTargetsWhenConverting) {
  // As NumPy or PyTorch write float64: 0.1 is not a float, so it rounds.
  const std::vector<double> wide = {0.1, -1e-3, 65504.0, 1.0 / 3.0};
  Bytes data(reinterpret_cast<const uint8_t*>(wide.data()),
             reinterpret_cast<const uint8_t*>(wide.data()) + wide.size() * sizeof(double));
  const std::string p = path("f64.safetensors");
  write_bytes(p, make_file(R"({"w":{"dtype":"F64","shape":[2,2],"data_offsets":[0,32]}})", data));
  Tensor w = zeros({2, 2}), h = zeros({2, 2}, kBFloat16);
  // Refused as before without the option, naming the tensor and the way out.
  expect_status(load_into(p, {{"w", w}}), StatusCode::kUnimplemented, {"\"w\"", "F64", "convert_dtypes"});
  EXPECT_EQ(load_safetensors(p).status().code(), StatusCode::kUnimplemented);
  LoadReport r;
  absl::Status s = load_into(p, {{"w", w}}, {.convert_dtypes = true}, &r);
  ASSERT_TRUE(s.ok()) << s;
  std::vector<float> got = w.to_vector<float>();
  for (size_t k = 0; k < wide.size(); ++k) EXPECT_EQ(got[k], static_cast<float>(wide[k])) << k;
  EXPECT_EQ(r.converted, std::vector<std::string>{"w: f64 -> f32"});
  s = load_into(p, {{"w", h}}, {.convert_dtypes = true}, &r);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(r.converted, std::vector<std::string>{"w: f64 -> bf16"});
  EXPECT_EQ(testing::values(h), testing::values(w.to(kBFloat16)));
  // A shape mismatch of an F64 tensor names it and its file dtype.
  expect_status(load_into(p, {{"w", zeros({4})}}, {.convert_dtypes = true}), StatusCode::kInvalidArgument,
                {"\"w\"", "f64", "[2, 2]"});
}

}  // namespace
}  // namespace encore
