// Files written whole or not at all (src/core/atomic_file.h): each kind of
// path of NOTE [ Writing a file atomically ] in src/core/atomic_file.cpp,
// every refusal and failure, in both write modes.
#include "src/core/atomic_file.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tests/test_util.h"

namespace encore {
namespace {

namespace fs = std::filesystem;
using absl::StatusCode;
using testing::dead_pid;
using testing::expect_status;

constexpr WriteMode kBothModes[] = {WriteMode::kAtomic, WriteMode::kAtomicWherePossible};

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

void spit(const std::string& path, const std::string& text) { std::ofstream(path, std::ios::binary) << text; }

mode_t permissions(const std::string& path) {
  struct stat st {};
  EXPECT_EQ(::stat(path.c_str(), &st), 0) << path;
  return st.st_mode & 07777;
}

bool is_link(const std::string& path) {
  struct stat st {};
  return ::lstat(path.c_str(), &st) == 0 && S_ISLNK(st.st_mode);
}

class AtomicFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const ::testing::TestInfo* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::path(::testing::TempDir()) / absl::StrCat("encore_atomic_", ::getpid(), "_", info->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    std::error_code ec;
    fs::permissions(dir_ / "ro", fs::perms::owner_all, fs::perm_options::add, ec);
    fs::remove_all(dir_, ec);
  }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  // The names in the test's directory, sorted (temporaries included).
  std::vector<std::string> files() const {
    std::vector<std::string> out;
    for (const fs::directory_entry& e : fs::directory_iterator(dir_)) out.push_back(e.path().filename().string());
    std::sort(out.begin(), out.end());
    return out;
  }

  fs::path dir_;
};

TEST_F(AtomicFileTest, WritesANewFileWholeWithThePermissionsOfAPlainCreation) {
  const mode_t mask = ::umask(022);
  for (WriteMode mode : kBothModes) {
    ::unlink(path("f").c_str());
    ASSERT_TRUE(write_file_atomically("test", path("f"), "hello\n", mode).ok());
    EXPECT_EQ(slurp(path("f")), "hello\n");
    EXPECT_EQ(permissions(path("f")), 0644u);
    EXPECT_EQ(files(), std::vector<std::string>{"f"});
  }
  ::umask(mask);
}

// A 0600 file must not become world-readable when written again (NOTE
// [ Writing a file atomically ]: a replaced file keeps its permission bits).
TEST_F(AtomicFileTest, ReplacingAFileKeepsItsPermissionBits) {
  for (WriteMode mode : kBothModes) {
    spit(path("f"), "old");
    ASSERT_EQ(::chmod(path("f").c_str(), 0600), 0);
    ASSERT_TRUE(write_file_atomically("test", path("f"), "new", mode).ok());
    EXPECT_EQ(slurp(path("f")), "new");
    EXPECT_EQ(permissions(path("f")), 0600u);
    EXPECT_EQ(files(), std::vector<std::string>{"f"});
  }
}

TEST_F(AtomicFileTest, AWriteThatFailsKeepsThePreviousFileAndRemovesTheTemporary) {
  spit(path("f"), "previous");
  for (WriteMode mode : kBothModes) {
    auto half = [](int fd, const std::string& file) {
      EXPECT_TRUE(write_full(fd, "half", 4));
      return absl::DataLossError(absl::StrCat("gave up writing ", file));
    };
    absl::StatusOr<StagedFile> staged = stage_file("test", path("f"), half, mode);
    expect_status(staged.status(), StatusCode::kDataLoss, {"gave up writing", path("f") + ".tmp."});
    EXPECT_EQ(slurp(path("f")), "previous");
    EXPECT_EQ(files(), std::vector<std::string>{"f"});
  }
}

// A file size limit (EFBIG), as a full disk gives ENOSPC: the write fails
// part way, reaches the caller with its cause, and changes nothing.
TEST_F(AtomicFileTest, AFileSizeLimitPartWayKeepsThePreviousFile) {
  spit(path("f"), "previous");
  absl::Status s;
  {
    testing::FileSizeLimit limit(4096);
    s = write_file_atomically("test", path("f"), std::string(1 << 16, 'x'));
  }
  expect_status(s, StatusCode::kOutOfRange, {"test: cannot write ", path("f") + ".tmp.", "File too large"});
  EXPECT_EQ(slurp(path("f")), "previous");
  EXPECT_EQ(files(), std::vector<std::string>{"f"});
}

TEST_F(AtomicFileTest, ADirectoryIsRefusedBeforeAnythingIsWritten) {
  fs::create_directories(dir_ / "d" / "inside");
  for (WriteMode mode : kBothModes) {
    expect_status(write_file_atomically("test", path("d"), "x", mode), StatusCode::kFailedPrecondition,
                  {"test: cannot write ", path("d"), "Is a directory"});
    expect_status(check_writable("test", path("d"), mode), StatusCode::kFailedPrecondition, {"Is a directory"});
    EXPECT_EQ(files(), std::vector<std::string>{"d"});
    EXPECT_TRUE(fs::is_directory(dir_ / "d" / "inside"));
  }
}

TEST_F(AtomicFileTest, AMissingDirectoryOrAFileOnTheWayIsRefusedNamingThePath) {
  spit(path("a_file"), "kept");
  for (WriteMode mode : kBothModes) {
    expect_status(write_file_atomically("test", "", "x", mode), StatusCode::kInvalidArgument, {"test: ", "empty path"});
    const std::string missing = path("no_such_dir/f");
    expect_status(write_file_atomically("test", missing, "x", mode), StatusCode::kNotFound,
                  {"test: cannot write " + missing + ": cannot create", "No such file or directory"});
    const std::string through_a_file = path("a_file/f");
    expect_status(write_file_atomically("test", through_a_file, "x", mode), StatusCode::kFailedPrecondition,
                  {"test: cannot write " + through_a_file, "Not a directory"});
    EXPECT_EQ(files(), std::vector<std::string>{"a_file"});
    EXPECT_EQ(slurp(path("a_file")), "kept");
  }
}

// Only a rename that fails after staging reaches this path: the target
// became a directory in between.
TEST_F(AtomicFileTest, AFailedRenameRemovesTheTemporary) {
  absl::StatusOr<StagedFile> staged = stage_file("test", path("f"), "x");
  ASSERT_TRUE(staged.ok()) << staged.status();
  fs::create_directories(dir_ / "f" / "inside");
  expect_status(staged->commit(), StatusCode::kFailedPrecondition, {"test: cannot rename", path("f")});
  EXPECT_EQ(files(), std::vector<std::string>{"f"});
  EXPECT_TRUE(fs::is_directory(dir_ / "f" / "inside"));
}

TEST_F(AtomicFileTest, AStagedFileIsAtItsPathOnlyOnceCommitted) {
  spit(path("f"), "previous");
  {
    absl::StatusOr<StagedFile> dropped = stage_file("test", path("f"), "dropped");
    ASSERT_TRUE(dropped.ok());
    EXPECT_EQ(files().size(), 2u);   // f and its temporary
  }
  EXPECT_EQ(slurp(path("f")), "previous");
  EXPECT_EQ(files(), std::vector<std::string>{"f"});
  absl::StatusOr<StagedFile> staged = stage_file("test", path("f"), "new");
  ASSERT_TRUE(staged.ok());
  EXPECT_EQ(slurp(path("f")), "previous");
  ASSERT_TRUE(staged->commit().ok());
  EXPECT_EQ(slurp(path("f")), "new");
  expect_status(staged->commit(), StatusCode::kInternal, {"committed twice"});
  EXPECT_EQ(files(), std::vector<std::string>{"f"});
}

// A link is followed as a plain open would follow it: the file it names is
// replaced, or created for a link to no file yet, and the link stays.
TEST_F(AtomicFileTest, LinksAreFollowedAndKept) {
  fs::create_directories(dir_ / "sub");
  spit(path("sub/target"), "old");
  fs::create_symlink("sub/target", dir_ / "link");    // relative to the link's directory
  fs::create_symlink(dir_ / "link", dir_ / "chain");   // a link to a link
  fs::create_symlink("not_yet", dir_ / "sub" / "dangling");
  for (WriteMode mode : kBothModes) {
    ASSERT_TRUE(write_file_atomically("test", path("chain"), "via chain", mode).ok());
    EXPECT_EQ(slurp(path("sub/target")), "via chain");
    ASSERT_TRUE(write_file_atomically("test", path("link"), "via link", mode).ok());
    EXPECT_EQ(slurp(path("sub/target")), "via link");
    ASSERT_TRUE(write_file_atomically("test", path("sub/dangling"), "created", mode).ok());
    EXPECT_EQ(slurp(path("sub/not_yet")), "created");
    EXPECT_TRUE(is_link(path("link")) && is_link(path("chain")) && is_link(path("sub/dangling")));
    EXPECT_EQ(files(), (std::vector<std::string>{"chain", "link", "sub"}));
    ASSERT_EQ(::unlink(path("sub/not_yet").c_str()), 0);
  }
  fs::create_symlink("loop_b", dir_ / "loop_a");
  fs::create_symlink("loop_a", dir_ / "loop_b");
  expect_status(write_file_atomically("test", path("loop_a"), "x"), StatusCode::kUnknown,
                {path("loop_a"), "Too many levels of symbolic links"});
}

// A device, fifo or socket, or a path in /dev or /proc, holds no file to
// keep, and a rename would replace the node: atomic writes refuse it.
TEST_F(AtomicFileTest, AtomicWritesRefuseWhatIsNoRegularFile) {
  ASSERT_EQ(::mkfifo(path("fifo").c_str(), 0600), 0);
  fs::create_symlink("/dev/null", dir_ / "to_null");
  std::vector<std::string> refused = {path("fifo"), path("to_null"), "/dev/stdout", "/proc/self/fd/1"};
  if (::access("/dev/full", F_OK) == 0) refused.push_back("/dev/full");
  for (const std::string& p : refused) {
    expect_status(write_file_atomically("test", p, "x"), StatusCode::kFailedPrecondition,
                  {"test: " + p, "not a regular file"});
  }
  struct stat st {};
  ASSERT_EQ(::lstat(path("fifo").c_str(), &st), 0);
  EXPECT_TRUE(S_ISFIFO(st.st_mode));
  EXPECT_TRUE(is_link("/dev/stdout"));
  EXPECT_TRUE(is_link(path("to_null")));
  EXPECT_EQ(files(), (std::vector<std::string>{"fifo", "to_null"}));
}

// Outputs (WriteMode::kAtomicWherePossible) go where a plain open sends
// them: /dev/full fails with its cause, a fifo's reader gets every byte.
TEST_F(AtomicFileTest, OutputsToWhatIsNoRegularFileAreWrittenInPlace) {
  constexpr WriteMode kOutput = WriteMode::kAtomicWherePossible;
  if (::access("/dev/full", F_OK) == 0) {
    expect_status(write_file_atomically("test", "/dev/full", "x", kOutput), StatusCode::kResourceExhausted,
                  {"test: cannot write /dev/full: No space left on device"});
    EXPECT_TRUE(check_writable("test", "/dev/full", kOutput).ok());
  }
  EXPECT_TRUE(write_file_atomically("test", "/dev/null", "x", kOutput).ok());
  ASSERT_EQ(::mkfifo(path("fifo").c_str(), 0600), 0);
  const std::string text(100000, 'y');   // more than a pipe holds: the reader must drain it
  std::string got;
  std::thread reader([&] { got = slurp(path("fifo")); });
  const absl::Status s = write_file_atomically("test", path("fifo"), text, kOutput);
  reader.join();
  EXPECT_TRUE(s.ok()) << s;
  EXPECT_EQ(got, text);
  struct stat st {};
  ASSERT_EQ(::lstat(path("fifo").c_str(), &st), 0);
  EXPECT_TRUE(S_ISFIFO(st.st_mode));
  EXPECT_EQ(files(), std::vector<std::string>{"fifo"});
}

// A path naming one of the process's descriptors is written through it:
// with stdout redirected to a file (`prog --trace=/dev/stdout > log`), the
// output truncated the log, losing what the program had printed, and the
// program's next line would have written over the output.
TEST_F(AtomicFileTest, OutputsToAnOpenDescriptorGoThroughIt) {
  constexpr WriteMode kOutput = WriteMode::kAtomicWherePossible;
  const int fd = ::open(path("log").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);   // as a shell's `>`
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::write(fd, "printed\n", 8), 8);
  const std::string by_proc = absl::StrCat("/proc/self/fd/", fd);
  fs::create_symlink(by_proc, dir_ / "to_fd");   // a link to it, as /dev/stdout is
  for (const std::string& p : {by_proc, path("to_fd"), absl::StrCat("/dev/fd/", fd)}) {
    const absl::Status s = write_file_atomically("test", p, "trace\n", kOutput);
    EXPECT_TRUE(s.ok()) << p << ": " << s;
    EXPECT_TRUE(check_writable("test", p, kOutput).ok()) << p;
  }
  ASSERT_EQ(::write(fd, "more\n", 5), 5);
  ASSERT_EQ(::close(fd), 0);
  EXPECT_EQ(slurp(path("log")), "printed\ntrace\ntrace\ntrace\nmore\n");
  EXPECT_TRUE(is_link(path("to_fd")));
  EXPECT_EQ(files(), (std::vector<std::string>{"log", "to_fd"}));
  // A descriptor that is not open: the error names the path.
  expect_status(write_file_atomically("test", by_proc, "x", kOutput), StatusCode::kFailedPrecondition,
                {"test: cannot open " + by_proc});
}

// Runs `fn` with the permissions of an unprivileged user: nobody (uid
// 65534) when the test runs as root, which no permission bit stops.
template <typename Fn>
void as_unprivileged(Fn fn) {
  const bool root = ::geteuid() == 0;
  if (root) {
    ASSERT_EQ(::seteuid(65534), 0);
  }
  fn();
  if (root) {
    ASSERT_EQ(::seteuid(0), 0);
  }
}

// A directory that admits no new file: an atomic write fails naming the
// cause and changes nothing; an output is written in place, as a plain
// open would write it.
TEST_F(AtomicFileTest, ADirectoryThatAdmitsNoNewFile) {
  fs::create_directories(dir_ / "ro");
  spit(path("ro/f"), "previous");
  ASSERT_EQ(::chmod(path("ro/f").c_str(), 0666), 0);
  ASSERT_EQ(::chmod(path("ro").c_str(), 0555), 0);
  ASSERT_EQ(::chmod(dir_.c_str(), 0755), 0);
  bool reachable = false;
  as_unprivileged([&] { reachable = ::access(path("ro/f").c_str(), W_OK) == 0; });
  if (!reachable) GTEST_SKIP() << "an unprivileged user cannot reach " << path("ro");
  absl::Status atomic, output, fresh, probe;
  as_unprivileged([&] {
    atomic = write_file_atomically("test", path("ro/f"), "atomic");
    probe = check_writable("test", path("ro/f"));
    fresh = write_file_atomically("test", path("ro/new"), "x", WriteMode::kAtomicWherePossible);
  });
  expect_status(atomic, StatusCode::kPermissionDenied, {"test: cannot write " + path("ro/f"), "Permission denied"});
  expect_status(probe, StatusCode::kPermissionDenied, {"Permission denied"});
  expect_status(fresh, StatusCode::kPermissionDenied, {"test: cannot write " + path("ro/new"), "Permission denied"});
  EXPECT_EQ(slurp(path("ro/f")), "previous");
  as_unprivileged(
      [&] { output = write_file_atomically("test", path("ro/f"), "in place", WriteMode::kAtomicWherePossible); });
  EXPECT_TRUE(output.ok()) << output;
  EXPECT_EQ(slurp(path("ro/f")), "in place");
  std::vector<std::string> in_ro;
  for (const fs::directory_entry& e : fs::directory_iterator(dir_ / "ro")) in_ro.push_back(e.path().filename());
  EXPECT_EQ(in_ro, std::vector<std::string>{"f"});
}

// The longest name this directory admits (NAME_MAX, 255 on Linux's filesystems).
size_t name_max(const fs::path& dir) {
  const long n = ::pathconf(dir.c_str(), _PC_NAME_MAX);
  return n > 0 ? static_cast<size_t>(n) : 255;
}

// The temporary a write of `file` makes (the name its WriteFileFn is given),
// found by a staged write that is then dropped (which removes it).
std::string temporary_of(const std::string& file) {
  std::string tmp;
  absl::StatusOr<StagedFile> staged = stage_file("test", file, [&](int, const std::string& name) {
    tmp = name;
    return absl::OkStatus();
  });
  EXPECT_TRUE(staged.ok()) << staged.status();
  return tmp;
}

// NOTE [ Temporaries of long names ] (src/core/atomic_file.cpp): every valid
// name up to NAME_MAX bytes is written atomically, ASCII or UTF-8, its
// temporary beside it and never longer than NAME_MAX; a name past NAME_MAX
// is refused before anything is written.
TEST_F(AtomicFileTest, NamesUpToNameMaxAreWrittenThroughATemporaryThatFits) {
  const size_t max = name_max(dir_);
  const std::string e_acute = "\xc3\xa9";   // a 2-byte character, cut nowhere
  std::vector<std::string> names;
  for (size_t n : {size_t{1}, max - 36, max - 35, max - 20, max - 1, max}) names.push_back(std::string(n, 'a'));
  std::string utf8 = "b";
  while (utf8.size() + 2 <= max) utf8 += e_acute;   // an odd length: every cut after the "b" is mid-character or not
  names.push_back(utf8);
  names.push_back(utf8.substr(1) + "c");
  for (const std::string& name : names) {
    SCOPED_TRACE(::testing::Message() << name.size() << "-byte name");
    const std::string tmp = temporary_of(path(name));
    const std::string tmp_name = fs::path(tmp).filename().string();
    EXPECT_EQ(fs::path(tmp).parent_path(), dir_);
    EXPECT_LE(tmp_name.size(), max);
    const size_t first_e = tmp_name.find(e_acute[0]);
    if (first_e != std::string::npos) {   // whole characters only: an even run of bytes after the first
      const size_t run = tmp_name.find_first_not_of(e_acute, first_e) - first_e;
      EXPECT_EQ(run % 2, 0u) << tmp_name;
    }
    for (WriteMode mode : kBothModes) {
      absl::Status st = write_file_atomically("test", path(name), "whole", mode);
      ASSERT_TRUE(st.ok()) << st;
      EXPECT_EQ(slurp(path(name)), "whole");
      EXPECT_EQ(files(), std::vector<std::string>{name});
    }
    fs::remove(path(name));
  }
  const std::string too_long(max + 1, 'a');
  for (WriteMode mode : kBothModes) {
    expect_status(write_file_atomically("test", path(too_long), "x", mode), StatusCode::kInvalidArgument,
                  {"test: cannot write ", "File name too long"});
  }
  EXPECT_TRUE(files().empty());
}

// NOTE [ Stale temporaries ] for long names: a shortened temporary that a
// dead process left is removed by the next write, like "<file>.tmp.<pid>.<n>";
// those of live processes, of another long name with the same first bytes,
// and other names are kept.
TEST_F(AtomicFileTest, ShortenedTemporariesOfDeadProcessesAreRemovedLikeTheOthers) {
  const size_t max = name_max(dir_);
  const std::string name(max, 'a'), other = std::string(max - 1, 'a') + "b";
  auto stem_of = [&](const std::string& file) {   // "<stem>.<pid>.<n>" -> "<stem>"
    std::string tmp = fs::path(temporary_of(path(file))).filename().string();
    tmp.erase(tmp.rfind('.'));
    tmp.erase(tmp.rfind('.'));
    return tmp;
  };
  const std::string stem = stem_of(name), other_stem = stem_of(other);
  ASSERT_NE(stem, other_stem);
  ASSERT_EQ(stem.compare(0, 100, name, 0, 100), 0) << stem;   // starts with the name
  const std::string dead = absl::StrCat(dead_pid()), self = absl::StrCat(::getpid());
  const std::vector<std::string> kept = {
      absl::StrCat(stem, ".", self, ".999999"),   // a live pid: ours
      absl::StrCat(stem, ".1.0"),                 // pid 1 is alive
      absl::StrCat(stem, ".", dead, ".0.bak"),    // not the exact pattern
      absl::StrCat(stem, ".", dead, "."),
      absl::StrCat(stem, "x.", dead, ".0"),
      absl::StrCat(other_stem, ".", dead, ".0")};   // the other name's
  for (const std::string& n : kept) spit(path(n), "kept");
  spit(path(absl::StrCat(stem, ".", dead, ".0")), "stale");
  spit(path(absl::StrCat(stem, ".", dead, ".17")), "stale");
  ASSERT_TRUE(write_file_atomically("test", path(name), "whole").ok());
  std::vector<std::string> expected = kept;
  expected.push_back(name);
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(files(), expected);
  spit(path(absl::StrCat(stem, ".", dead, ".3")), "stale");
  remove_stale_temporaries(path(name));
  EXPECT_EQ(files(), expected);
}

// The probe before long work: the checks of a write, and nothing changed.
TEST_F(AtomicFileTest, CheckWritableChangesNothing) {
  spit(path("f"), "kept");
  for (WriteMode mode : kBothModes) {
    EXPECT_TRUE(check_writable("test", path("f"), mode).ok());
    EXPECT_TRUE(check_writable("test", path("new"), mode).ok());
    expect_status(check_writable("test", path("no_such_dir/f"), mode), StatusCode::kNotFound,
                  {path("no_such_dir/f"), "No such file or directory"});
    EXPECT_EQ(slurp(path("f")), "kept");
    EXPECT_EQ(files(), std::vector<std::string>{"f"});
  }
}

}  // namespace
}  // namespace encore
