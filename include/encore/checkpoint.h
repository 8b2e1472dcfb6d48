// Checkpoints: named tensors saved to and loaded from safetensors files, so
// weights written by other tools (PyTorch, JAX, Hugging Face) load here and
// ours load there.
//
//   encore::NamedTensors params = {{"fc1.weight", w1}, {"fc1.bias", b1}};
//   absl::Status s = encore::save_safetensors("model.safetensors", params, {{"step", "1000"}});
//   ...
//   // Restore into existing parameters (strict: same names, shapes, dtypes):
//   absl::Status r = encore::load_into("model.safetensors", params);
//   if (!r.ok()) std::cerr << r << "\n";   // names the file, the tensor and the problem
//   // Or read everything as new CPU tensors:
//   absl::StatusOr<encore::NamedTensors> all = encore::load_safetensors("model.safetensors");
//
// The format (https://github.com/huggingface/safetensors), all sizes in bytes:
//   [8 bytes]  N, a little-endian u64: the length of the JSON header
//   [N bytes]  UTF-8 JSON object: {"name": {"dtype": "F32", "shape": [2, 3],
//              "data_offsets": [begin, end]}, ..., "__metadata__": {"k": "v"}}
//              (may end with spaces, padding the data section to 8-byte alignment)
//   [rest]     the data section: each tensor's elements, row-major, little-endian,
//              at [begin, end) relative to the start of the data section.
// encore reads and writes the dtypes it stores: F32, F16, BF16, I32, I64, BOOL.
//
// Errors (every function returns a Status, never throws or aborts):
//   NotFound          the file does not exist; load_into: a target is not in the file
//   DataLoss          the file is shorter than its own header says (truncated)
//   InvalidArgument   any other malformed file (JSON, types, dtype, shape, offsets,
//                     overlaps, holes, duplicate or empty names, more than 100,000
//                     tensors); bad arguments (empty or duplicate names, more than
//                     100,000 tensors or metadata keys, a header over 100 MB);
//                     load_into: extra tensors in the file, or a
//                     shape/dtype that differs from its target
//   Unimplemented     a valid safetensors dtype encore does not store (F64, U8, ...);
//                     load_into with LoadOptions::convert_dtypes reads F64 into float targets
//   FailedPrecondition save: `path` is a directory, device, fifo or socket, or in /dev or /proc
//   other codes       I/O errors, mapped from errno (ENOSPC: ResourceExhausted,
//                     EFBIG: OutOfRange, EACCES: PermissionDenied); the message
//                     has the errno text
// Messages name the file and, where one is involved, the tensor.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "encore/tensor.h"

namespace encore {

// Tensors with their names, in order. Names are unique and non-empty.
using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

// Writes `tensors` (in the given order; non-contiguous ones are written
// contiguous) and `metadata` (the header's "__metadata__") to `path`.
// Atomic: the bytes go to `path + ".tmp.<pid>.<n>"` (this process's pid, a
// per-process counter; where that would make the file name longer than
// NAME_MAX, 255 bytes, "<first bytes of the name>.tmp~<hash>.<pid>.<n>",
// <hash> 16 hex digits of a hash of the whole name), which is fsynced and
// then renamed over `path`. So `path` always holds a whole file, the
// previous one or the new one:
//   - an error mid-save (a full disk, a failed write, fsync or rename) is
//     returned, leaves any previous file as it was and removes the temporary;
//   - a crash or kill -9 mid-save leaves the previous file and the temporary.
//     The next save or load of `path` (any of the four functions here)
//     removes such leftovers: files in path's directory named exactly
//     "<file name>.tmp.<pid>.<n>" (or the shortened form above, for that
//     name) whose pid is not this process and names no live process
//     (kill(pid, 0) fails with ESRCH). Temporaries of live processes, of
//     other paths and any other name are never touched.
//     Caveat: on a directory shared between machines or pid namespaces, a
//     save in progress elsewhere may lose its temporary; that save then fails
//     (cannot rename) and `path` still holds a whole file.
// The file gets the permissions that creating it in place would: 0666 &
// ~umask when it is new, the permission bits of the regular file it replaces
// otherwise (the temporary is never more open than that).
// A symbolic link is followed: the file it names is replaced (or created),
// the link stays. A `path` that is a device, fifo or socket (/dev/full), or
// any path in /dev or /proc (/dev/stdout), is refused (FailedPrecondition)
// before anything is written: the rename would replace the node. So is a
// directory (FailedPrecondition, EISDIR). NOTE [ Writing a file atomically ]
// in src/core/atomic_file.cpp has the details.
// A tensor may not be named "__metadata__". Reads tensor data on the host,
// so it is refused inside capture.
[[nodiscard]] absl::Status save_safetensors(const std::string& path, const NamedTensors& tensors,
                                            const std::map<std::string, std::string>& metadata = {});

// Reads every tensor of `path` into new contiguous CPU tensors, in the order of
// their data in the file (ascending data_offsets). The whole file is validated
// before it is trusted; see the error table above.
[[nodiscard]] absl::StatusOr<NamedTensors> load_safetensors(const std::string& path);

// Reads the "__metadata__" map of `path` (empty when absent), after validating
// the header as load_safetensors does. Reads only the header.
[[nodiscard]] absl::StatusOr<std::map<std::string, std::string>> load_safetensors_metadata(
    const std::string& path);

// The name and shape of each tensor of `path`, in the order of their data
// in the file, after validating the header as load_safetensors does (F64
// entries are listed too: load_into with LoadOptions::convert_dtypes reads
// them). Reads only the header, so that a file can be checked against what
// a caller expects before anything is allocated for it.
[[nodiscard]] absl::StatusOr<std::vector<std::pair<std::string, Shape>>> load_safetensors_shapes(
    const std::string& path);

// How load_into forgives a file that is not exactly its targets.
struct LoadOptions {
  // true: every target must be in the file and the file may hold nothing
  // else. false: targets the file lacks keep their values and file tensors
  // no target names are skipped (not read); both are listed in LoadReport.
  bool strict = true;
  // Float tensors (F64, F32, F16, BF16 in the file) are converted to the
  // target's float dtype, rounding to nearest (F64 to F16/BF16 goes through
  // F32, so it rounds twice); each conversion is listed in LoadReport.
  // Non-float dtypes must still match. false: a dtype mismatch is refused.
  bool convert_dtypes = false;
};

// What a load did beyond copying same-named, same-typed tensors.
struct LoadReport {
  std::vector<std::string> missing;      // targets not in the file (strict = false)
  std::vector<std::string> unexpected;   // file tensors no target names (strict = false)
  std::vector<std::string> converted;    // "name: f64 -> f32", in target order
};

// Copies each tensor of `path` into the target of the same name, in place
// (copy_ under NoGradGuard): targets keep their storage, so parameters that
// require grad can be loaded and captured graphs that point at them stay valid.
// Strict, like PyTorch's load_state_dict(strict=True): every target must be in
// the file (NotFound), the file may hold no other tensor (InvalidArgument), and
// shapes and dtypes must match exactly (InvalidArgument). Everything is read
// and checked before the first target is written: on error no target changes.
[[nodiscard]] absl::Status load_into(const std::string& path, const NamedTensors& targets);
// The same with `options` (see LoadOptions); `report` (optional) receives
// what was missing, skipped and converted. Shape mismatches and every other
// refusal still fail, naming the tensor, and still before any target changes.
//
//   encore::LoadReport report;
//   absl::Status s = encore::load_into("model.safetensors", params,
//                                      {.strict = false, .convert_dtypes = true}, &report);
//   for (const std::string& m : report.missing) std::cerr << "not in the file: " << m << "\n";
[[nodiscard]] absl::Status load_into(const std::string& path, const NamedTensors& targets,
                                     const LoadOptions& options, LoadReport* report = nullptr);

}  // namespace encore
