// Files written whole or not at all (atomic_file.h).
//
// NOTE [ Writing a file atomically ]: what each kind of path gets.
//   - absent, or a regular file: the bytes go to "<file>.tmp.<pid>.<n>"
//     beside it (this process's pid, a per-process counter, so concurrent
//     writes never share one; shorter for a name near NAME_MAX, NOTE
//     [ Temporaries of long names ]), which is written, fsynced, closed and
//     renamed over the file; the directory is then fsynced (best effort).
//     Any error removes the temporary and leaves the file as it was.
//   - a symbolic link, or a chain of them: followed as open(O_CREAT) would;
//     the file it names is replaced (or created, for a link to no file yet)
//     and the link stays. A loop of links is ELOOP.
//   - a directory: EISDIR before anything is written; an empty path:
//     InvalidArgument.
//   - a missing directory, or a component that is no directory: ENOENT or
//     ENOTDIR, from creating the temporary.
//   - no regular file (a device, fifo or socket) or any path in /dev/ or
//     /proc/, even through a link: /dev/stdout and /proc/self/fd/1 name what
//     the descriptor holds, and a rename would replace the node (even a
//     system's /dev/stdout link, as root). WriteMode::kAtomic refuses it
//     (FailedPrecondition); kAtomicWherePossible writes it in place,
//     O_WRONLY | O_CREAT | O_TRUNC as a plain open (a fifo waits for its
//     reader), there being no file to keep. A path that names one of this
//     process's open descriptors (/dev/stdout, /dev/stderr, /dev/fd/N,
//     /proc/self/fd/N, directly or through links) is written through that
//     descriptor (a dup of it), and another process's (/proc/<pid>/fd/N) is
//     opened O_APPEND: with stdout redirected to a file (`prog
//     --trace=/dev/stdout > log`), O_TRUNC emptied the log of what the
//     program had printed, and a description of its own, at offset 0,
//     would write over it and be written over by the program's next line.
//   - a regular file whose directory admits no new file (the temporary's
//     creation fails with EACCES, EPERM or EROFS): kAtomic returns that
//     error; kAtomicWherePossible writes the file in place, not atomically,
//     as a plain open would.
// Permissions: as writing the file in place would give them (open(path,
// O_CREAT | O_TRUNC, 0666), as torch.save and the safetensors reference
// do): a new file gets 0666 & ~umask, a replaced regular file keeps its
// permission bits (a 0600 file stays 0600 whatever the umask). The
// temporary is created with those bits, which the umask may narrow but never
// widen, and set exactly with fchmod before its first byte is written, so it
// is never more open than the file it becomes. Owner and group are the
// writing process's, as for any file it creates. A leftover of the
// temporary's name (its pid is ours, so its process is dead) is removed
// first: O_EXCL then creates the file afresh.
#include "src/core/atomic_file.h"

#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace encore {
namespace {

constexpr int kMaxLinks = 40;   // links followed before ELOOP, as Linux's path walk

absl::Status io_error(const char* op, absl::string_view action, const std::string& file, int err) {
  return absl::ErrnoToStatus(err, absl::StrCat(op, ": ", action, " ", file));
}

// The directory of `path` and its last component ("m.st" -> ".", "m.st").
std::pair<std::string, std::string> split_path(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return {".", path};
  return {slash == 0 ? "/" : path.substr(0, slash), path.substr(slash + 1)};
}

// Where the symbolic link `path` leads: its target, a relative one resolved
// against `path`'s directory. is_link is false when `path` is no link (or
// cannot be read); too_long when the target does not fit PATH_MAX.
struct Link {
  bool is_link = false;
  bool too_long = false;
  std::string to;
};

Link read_link(const std::string& path) {
  char link[PATH_MAX];
  const ssize_t n = ::readlink(path.c_str(), link, sizeof link);
  if (n < 0) return {};
  if (static_cast<size_t>(n) == sizeof link) return {true, true, {}};
  std::string to(link, static_cast<size_t>(n));
  if (to.empty() || to[0] != '/') to = absl::StrCat(split_path(path).first, "/", to);
  return {true, false, std::move(to)};
}

// /dev/ and /proc/ hold no files to replace (NOTE [ Writing a file atomically ]).
bool in_dev_or_proc(const std::string& path) {
  std::error_code ec;
  const std::string p = std::filesystem::absolute(path, ec).lexically_normal().string();
  return !ec && (absl::StartsWith(p, "/dev/") || absl::StartsWith(p, "/proc/"));
}

// What a path in /dev or /proc names (NOTE [ Writing a file atomically ]).
struct Descriptor {
  bool named = false;   // /dev/stdout, /dev/stderr, /dev/fd/N or /proc/<pid>/fd/N, directly or through links
  int own = -1;         // N when it is one of this process's descriptors
};

Descriptor descriptor_of(std::string path) {
  for (int links = 0; links <= kMaxLinks; ++links) {
    std::error_code ec;
    const std::string p = std::filesystem::absolute(path, ec).lexically_normal().string();
    if (ec) return {};
    const auto [dir, base] = split_path(p);
    int n = -1;
    if (p == "/dev/stdout" || p == "/dev/stderr") return {true, p == "/dev/stdout" ? 1 : 2};
    const bool own_dir =
        dir == "/dev/fd" || dir == "/proc/self/fd" || dir == absl::StrCat("/proc/", ::getpid(), "/fd");
    if (own_dir && absl::SimpleAtoi(base, &n) && n >= 0) return {true, n};
    if (absl::StartsWith(dir, "/proc/") && absl::EndsWith(dir, "/fd") && std::count(dir.begin(), dir.end(), '/') == 3) {
      return {true, -1};   // another process's
    }
    Link link = read_link(p);
    if (!link.is_link || link.too_long) return {};
    path = std::move(link.to);
  }
  return {};
}

enum class Kind { kNew, kRegular, kDirectory, kNoFile };

// What a write of a path would replace: the file its links lead to.
struct Target {
  std::string file;
  Kind kind = Kind::kNew;
  mode_t mode = 0666;   // a replaced regular file's permission bits
};

absl::StatusOr<Target> examine(const char* op, const std::string& path) {
  if (path.empty()) return absl::InvalidArgumentError(absl::StrCat(op, ": no file named (an empty path)"));
  Target t{path};
  for (int links = 0;; ++links) {
    if (in_dev_or_proc(t.file)) {
      t.kind = Kind::kNoFile;
      return t;
    }
    Link link = read_link(t.file);
    if (!link.is_link) break;   // no link (or no file: creating the temporary says why)
    if (links == kMaxLinks || link.too_long) {
      return io_error(op, "cannot follow the links of", path, links == kMaxLinks ? ELOOP : ENAMETOOLONG);
    }
    t.file = std::move(link.to);
  }
  struct stat st {};
  if (::stat(t.file.c_str(), &st) != 0) return t;   // absent: created
  if (S_ISDIR(st.st_mode)) return io_error(op, "cannot write", path, EISDIR);
  t.kind = S_ISREG(st.st_mode) ? Kind::kRegular : Kind::kNoFile;
  t.mode = st.st_mode & 0777;
  return t;
}

// The pid of `name` when it is exactly "<head><pid>.<n>" (both decimal), else 0.
pid_t temporary_pid(absl::string_view name, absl::string_view head) {
  if (!absl::ConsumePrefix(&name, head)) return 0;
  const size_t dot = name.find('.');
  if (dot == absl::string_view::npos) return 0;
  const absl::string_view pid_text = name.substr(0, dot), counter_text = name.substr(dot + 1);
  auto digits = [](absl::string_view t) {
    return !t.empty() && t.size() <= 20 && std::all_of(t.begin(), t.end(), [](char c) { return c >= '0' && c <= '9'; });
  };
  int32_t pid = 0;
  uint64_t counter = 0;
  if (!digits(pid_text) || !digits(counter_text) || !absl::SimpleAtoi(pid_text, &pid) ||
      !absl::SimpleAtoi(counter_text, &counter) || pid <= 0) {
    return 0;
  }
  return static_cast<pid_t>(pid);
}

// NOTE [ Temporaries of long names ]: "<base>.tmp.<pid>.<n>" is up to
// kPlainSuffix bytes longer than the file's own name `base` (a 10-digit pid,
// a 20-digit counter), and a directory admits names of at most NAME_MAX
// bytes (pathconf; 255 on Linux's filesystems), so a valid name of 220 to
// 255 bytes could have no temporary. Where "<base>.tmp.<pid>.<n>" does not
// fit, the temporary is "<stem>.<pid>.<n>" with the stem
// "<prefix>.tmp~<hash>": the first NAME_MAX - kStemSuffix bytes of `base`
// (cut before a UTF-8 continuation byte) and 16 hex digits of the FNV-1a
// hash of the whole of `base`, at most NAME_MAX bytes for every pid and
// counter. NOTE [ Stale temporaries ] recognises both forms, and only the
// file's own: a plain temporary has "tmp" right before ".<pid>.<n>" where a
// stem has a hex digit, the hash tells apart long names that share the
// prefix, and the stem is looked for only for names long enough to need
// one. A name longer than NAME_MAX is refused (ENAMETOOLONG) before a
// temporary is made.
constexpr size_t kPlainSuffix = 36;   // ".tmp." + 10 + "." + 20
constexpr size_t kStemSuffix = 53;    // ".tmp~" + 16 + "." + 10 + "." + 20

size_t name_max(const std::string& dir) {
  const long n = ::pathconf(dir.c_str(), _PC_NAME_MAX);
  return n > 0 ? static_cast<size_t>(n) : size_t{NAME_MAX};
}

// The stem of a long name's temporaries (the NOTE), or "" when every
// "<base>.tmp.<pid>.<n>" fits in `max` bytes.
std::string long_name_stem(absl::string_view base, size_t max) {
  if (base.size() + kPlainSuffix <= max) return "";
  uint64_t hash = 14695981039346656037ull;   // FNV-1a, 64 bits: the same in every process and build
  for (unsigned char c : base) hash = (hash ^ c) * 1099511628211ull;
  size_t keep = std::min(base.size(), max > kStemSuffix ? max - kStemSuffix : 0);
  while (keep > 0 && keep < base.size() && (static_cast<unsigned char>(base[keep]) & 0xC0) == 0x80) --keep;
  return absl::StrCat(base.substr(0, keep), ".tmp~", absl::Hex(hash, absl::kZeroPad16));
}

// NOTE [ Stale temporaries ]: a write killed between creating its temporary
// and renaming it (kill -9, a crash, power loss) leaves "<file>.tmp.<pid>.<n>"
// (or, for a long name, "<stem>.<pid>.<n>": NOTE [ Temporaries of long
// names ]) behind. Every write of the file (and every load of a checkpoint)
// first removes those whose process is gone: exactly that pattern in the
// file's directory, a pid other than ours, and kill(pid, 0) failing with
// ESRCH. A live pid (ours included) keeps its file, so writes in progress
// are never touched; a reused pid only keeps a stale file longer. Best
// effort: an unreadable directory or a failed unlink changes nothing and is
// not an error. `file` has its links resolved.
void remove_stale_temporaries_of(const std::string& file) {
  const auto [dir, base] = split_path(file);
  if (base.empty()) return;
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return;
  const pid_t self = ::getpid();
  const std::string plain = absl::StrCat(base, ".tmp."), stem = long_name_stem(base, name_max(dir));
  std::vector<std::string> stale;
  while (const dirent* e = ::readdir(d)) {
    pid_t pid = temporary_pid(e->d_name, plain);
    if (pid == 0 && !stem.empty()) pid = temporary_pid(e->d_name, absl::StrCat(stem, "."));
    if (pid > 0 && pid != self && ::kill(pid, 0) != 0 && errno == ESRCH) stale.emplace_back(e->d_name);
  }
  ::closedir(d);
  for (const std::string& name : stale) (void)::unlink(absl::StrCat(dir, "/", name).c_str());
}

// Unique per process and per call, so concurrent writes never share a
// temporary; shortened where the file's name is long (NOTE [ Temporaries of
// long names ]). A name past NAME_MAX is refused here, before anything is
// written.
absl::StatusOr<std::string> temp_path(const char* op, const std::string& file) {
  static std::atomic<uint64_t> counter{0};
  const auto [dir, base] = split_path(file);
  const size_t max = name_max(dir);
  if (base.size() > max) return io_error(op, "cannot write", file, ENAMETOOLONG);
  std::string tmp = absl::StrCat(base, ".tmp.", ::getpid(), ".", counter.fetch_add(1));
  if (tmp.size() > max) {
    tmp = absl::StrCat(long_name_stem(base, max), tmp.substr(base.size() + std::strlen(".tmp")));
  }
  return absl::StrCat(absl::string_view(file).substr(0, file.size() - base.size()), tmp);
}

// NOTE [ Writing a file atomically ] says why the bits and the unlink.
absl::StatusOr<UniqueFd> create_temporary(const char* op, const std::string& tmp, const Target& t) {
  (void)::unlink(tmp.c_str());
  UniqueFd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, t.mode));
  if (fd.get() < 0) return io_error(op, absl::StrCat("cannot write ", t.file, ": cannot create"), tmp, errno);
  if (t.kind == Kind::kRegular && ::fchmod(fd.get(), t.mode) != 0) {
    const int err = errno;
    (void)::unlink(tmp.c_str());
    return io_error(op, "cannot set the permissions of", tmp, err);
  }
  return fd;
}

// The file itself, opened as a plain open would; where the path names an
// open descriptor, that descriptor (a dup: this process's) or the file
// appended to (another's) (NOTE [ Writing a file atomically ]). A probe
// appends (truncates and creates nothing) and writes nothing.
absl::Status write_in_place(const char* op, const std::string& path, WriteFileFn write, bool probe) {
  const Descriptor d = descriptor_of(path);
  const int flags = probe || d.named ? O_WRONLY | O_APPEND : O_WRONLY | O_CREAT | O_TRUNC;
  UniqueFd fd(d.own >= 0 ? ::fcntl(d.own, F_DUPFD_CLOEXEC, 0)
                         : ::open(path.c_str(), flags | O_CLOEXEC | O_NOCTTY, 0666));
  if (fd.get() < 0) return io_error(op, "cannot open", path, errno);
  absl::Status s = probe ? absl::OkStatus() : write(fd.get(), path);
  if (s.ok() && fd.close() != 0) s = io_error(op, "cannot write", path, errno);
  return s;
}

absl::StatusOr<StagedFile> stage(const char* op, const std::string& path, WriteFileFn write, WriteMode mode,
                                 bool probe) {
  absl::StatusOr<Target> t = examine(op, path);
  if (!t.ok()) return t.status();
  const bool may_write_in_place = mode == WriteMode::kAtomicWherePossible;
  auto in_place = [&]() -> absl::StatusOr<StagedFile> {
    absl::Status s = write_in_place(op, path, write, probe);
    if (!s.ok()) return s;
    return StagedFile(op, t->file, "");
  };
  if (t->kind == Kind::kNoFile) {
    if (may_write_in_place) return in_place();
    return absl::FailedPreconditionError(absl::StrCat(
        op, ": ", path, ": not a regular file (a device, fifo or socket, or a path in /dev or /proc); an "
        "atomic write would replace it (it renames a temporary over the path)"));
  }
  remove_stale_temporaries_of(t->file);
  absl::StatusOr<std::string> tmp_path = temp_path(op, t->file);
  if (!tmp_path.ok()) return tmp_path.status();
  std::string tmp = *std::move(tmp_path);
  absl::StatusOr<UniqueFd> fd = create_temporary(op, tmp, *t);
  if (!fd.ok()) {
    const bool read_only_directory = fd.status().code() == absl::StatusCode::kPermissionDenied;
    if (may_write_in_place && read_only_directory && t->kind == Kind::kRegular) return in_place();
    return fd.status();
  }
  absl::Status s = probe ? absl::OkStatus() : write(fd->get(), tmp);
  if (s.ok() && ::fsync(fd->get()) != 0) s = io_error(op, "cannot fsync", tmp, errno);
  if (s.ok() && fd->close() != 0) s = io_error(op, "cannot close", tmp, errno);
  if (!s.ok()) {
    (void)::unlink(tmp.c_str());   // the file, if any, is untouched
    return s;
  }
  return StagedFile(op, t->file, std::move(tmp));
}

}  // namespace

int UniqueFd::close() { return fd_ < 0 ? 0 : ::close(std::exchange(fd_, -1)); }

bool write_full(int fd, const void* src, uint64_t n) {
  uint64_t done = 0;
  while (done < n) {
    const ssize_t r = ::write(fd, static_cast<const char*>(src) + done, n - done);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return false;
    if (r == 0) {   // no progress and no error: report it as a full device rather than spin
      errno = ENOSPC;
      return false;
    }
    done += static_cast<uint64_t>(r);
  }
  return true;
}

void sync_parent_directory(const std::string& path) {
  const std::string dir = split_path(path).first;
  UniqueFd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (fd.get() >= 0) (void)::fsync(fd.get());
}

void remove_stale_temporaries(const std::string& path) {
  absl::StatusOr<Target> t = examine("remove_stale_temporaries", path);
  if (t.ok() && t->kind != Kind::kNoFile) remove_stale_temporaries_of(t->file);
}

StagedFile::StagedFile(const char* op, std::string file, std::string tmp)
    : op_(op), file_(std::move(file)), tmp_(std::move(tmp)) {}

StagedFile::StagedFile(StagedFile&& other) noexcept
    : op_(other.op_),
      file_(std::move(other.file_)),
      tmp_(std::move(other.tmp_)),
      pending_(std::exchange(other.pending_, false)) {}

StagedFile::~StagedFile() {
  if (pending_ && !tmp_.empty()) (void)::unlink(tmp_.c_str());
}

absl::Status StagedFile::commit() {
  if (!std::exchange(pending_, false)) {
    return absl::InternalError(absl::StrCat(op_, ": ", file_, ": committed twice"));
  }
  if (tmp_.empty()) return absl::OkStatus();   // written in place
  if (::rename(tmp_.c_str(), file_.c_str()) != 0) {
    const int err = errno;
    (void)::unlink(tmp_.c_str());   // the file keeps what it held
    return io_error(op_, absl::StrCat("cannot rename ", tmp_, " to"), file_, err);
  }
  sync_parent_directory(file_);
  return absl::OkStatus();
}

absl::StatusOr<StagedFile> stage_file(const char* op, const std::string& path, WriteFileFn write, WriteMode mode) {
  return stage(op, path, write, mode, /*probe=*/false);
}

absl::StatusOr<StagedFile> stage_file(const char* op, const std::string& path, absl::string_view contents,
                                      WriteMode mode) {
  return stage_file(
      op, path,
      [&](int fd, const std::string& file) {
        return write_full(fd, contents.data(), contents.size()) ? absl::OkStatus()
                                                                : io_error(op, "cannot write", file, errno);
      },
      mode);
}

absl::Status write_file_atomically(const char* op, const std::string& path, absl::string_view contents,
                                   WriteMode mode) {
  absl::StatusOr<StagedFile> staged = stage_file(op, path, contents, mode);
  return staged.ok() ? staged->commit() : staged.status();
}

absl::Status check_writable(const char* op, const std::string& path, WriteMode mode) {
  auto nothing = [](int, const std::string&) { return absl::OkStatus(); };
  return stage(op, path, nothing, mode, /*probe=*/true).status();
}

}  // namespace encore
