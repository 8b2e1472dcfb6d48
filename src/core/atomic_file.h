// Files written whole or not at all: the one way encore writes a file a user
// named (checkpoints, Chrome traces, DOT graphs, the tools' plans, JSON and
// SVG). Core holds it so that every layer above, the tools and the tests use
// it; the planner, which includes nothing of encore's, cannot.
//
// A failed write (a full disk, a file size limit, a crash) must not leave
// half a file where the last good one was. So the bytes go to a temporary
// beside the file, "<file>.tmp.<pid>.<n>" (shortened to fit NAME_MAX for a
// long name: NOTE [ Temporaries of long names ]), which is written, fsynced,
// closed and renamed over the file; on any error the temporary is removed and the
// file keeps what it held. NOTE [ Writing a file atomically ] in
// atomic_file.cpp says what each kind of path gets (links, directories,
// devices, pipes, read-only directories, permissions, crash leftovers).
//
//   // A whole string, written in place where no rename can work (/dev/stdout, a pipe):
//   absl::Status s = encore::write_file_atomically("write_chrome_trace", path, json,
//                                                  encore::WriteMode::kAtomicWherePossible);
//
//   // Bytes streamed from elsewhere, or two files renamed in the order the caller chooses:
//   absl::StatusOr<encore::StagedFile> weights = encore::stage_file(
//       "save_gpt2", dir + "/model.safetensors", [&](int fd, const std::string& file) { return write(fd, file); });
//   if (!weights.ok()) return weights.status();
//   absl::StatusOr<encore::StagedFile> config = encore::stage_file("save_gpt2", dir + "/config.json", text);
//   if (!config.ok()) return config.status();   // removes the weights' temporary too
//   if (absl::Status s = weights->commit(); !s.ok()) return s;
//   return config->commit();
//
// Errors: "<op>: <what failed> <file>: <errno text>", the code from errno as
// absl::ErrnoToStatus maps it (ENOENT NotFound, EACCES PermissionDenied,
// ENOSPC ResourceExhausted, EISDIR and ENOTDIR FailedPrecondition, ...).
// <file> is the path or its temporary, whose name starts with the path (for
// a name within 36 bytes of NAME_MAX, with the path's directory and the
// first bytes of its name).
#pragma once

#include <cstdint>
#include <string>
#include <utility>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace encore {

// What a write does where a temporary and a rename cannot replace the file.
enum class WriteMode {
  // Checkpoints: always a temporary and a rename. A path that is no regular
  // file (a device, fifo or socket, anything in /dev/ or /proc/) is refused
  // with FailedPrecondition before anything is written: the rename would
  // replace the node.
  kAtomic,
  // Outputs a user may send anywhere (traces, graphs, plans, pictures):
  // atomic for a regular file or a new one; written in place, as a plain
  // open would, for a path that is no regular file (/dev/stdout, a pipe) and
  // for a regular file in a directory that admits no new file.
  kAtomicWherePossible,
};

// Writes the whole file to the open descriptor `fd`; `file` is its name, for
// messages. Returns an error (with its own message) to abandon the write.
using WriteFileFn = absl::FunctionRef<absl::Status(int fd, const std::string& file)>;

// A file written in full to its temporary, fsynced and closed, not yet at its
// path. Destroying it without commit() removes the temporary. A file written
// in place (WriteMode::kAtomicWherePossible) is already whole: commit() has
// nothing to do.
class StagedFile {
 public:
  // `file`: the path the temporary replaces (links resolved); `tmp`: the
  // temporary, or empty when the file was written in place.
  StagedFile(const char* op, std::string file, std::string tmp);
  StagedFile(StagedFile&& other) noexcept;
  StagedFile& operator=(StagedFile&&) = delete;
  ~StagedFile();
  // Renames the temporary over the file, then fsyncs its directory (best
  // effort), so that the rename survives a crash before the next one. On
  // error the temporary is removed and the file keeps what it held.
  [[nodiscard]] absl::Status commit();

 private:
  const char* op_;
  std::string file_, tmp_;
  bool pending_ = true;   // false once committed, or moved from
};

// Stages `path`: `write` fills the temporary (or, in place, the file). `op`
// (a static string) starts every message.
[[nodiscard]] absl::StatusOr<StagedFile> stage_file(const char* op, const std::string& path, WriteFileFn write,
                                                    WriteMode mode = WriteMode::kAtomic);
// `contents` as the whole file, the same way.
[[nodiscard]] absl::StatusOr<StagedFile> stage_file(const char* op, const std::string& path,
                                                    absl::string_view contents, WriteMode mode = WriteMode::kAtomic);
// stage_file, then commit.
[[nodiscard]] absl::Status write_file_atomically(const char* op, const std::string& path, absl::string_view contents,
                                                 WriteMode mode = WriteMode::kAtomic);

// Whether a write of `path` could start, checked before long work whose
// result would go there (encore-plan's --out): the same checks as
// stage_file, then its temporary created and removed (or, where the file
// would be written in place, the file opened for appending, which creates
// nothing). Leaves `path` as it was.
[[nodiscard]] absl::Status check_writable(const char* op, const std::string& path,
                                          WriteMode mode = WriteMode::kAtomic);

// Removes the temporaries of `path` that crashed writes left (NOTE [ Stale
// temporaries ] in atomic_file.cpp). stage_file does it first; readers of a
// file that is saved this way may too. Best effort, never an error.
void remove_stale_temporaries(const std::string& path);

// fsyncs the directory holding `path` (best effort: some filesystems
// refuse), so that a rename or creation in it survives a crash.
void sync_parent_directory(const std::string& path);

// Writes all n bytes to `fd`, retrying after EINTR and short writes; false
// with errno set on failure (ENOSPC for a write that makes no progress).
bool write_full(int fd, const void* src, uint64_t n);

// A file descriptor, closed when the object goes (or by close()).
class UniqueFd {
 public:
  explicit UniqueFd(int fd) : fd_(fd) {}
  UniqueFd(UniqueFd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  ~UniqueFd() { close(); }
  int get() const { return fd_; }
  // close()'s result: deferred write errors (NFS, quotas) show up here.
  int close();

 private:
  int fd_;
};

}  // namespace encore
