// Safetensors files for encore's own savers and loaders (src/io only; the
// public API is include/encore/checkpoint.h): a file read through one open
// descriptor and one parsed header, and files written to temporaries that
// are renamed into place when the caller says so (core's StagedFile,
// src/core/atomic_file.h).
//
//   // Reading: metadata, names and tensors all come from the one file that
//   // was at `path` when it was opened, whatever a save renames over it later.
//   absl::StatusOr<io::SafetensorsFile> f = io::SafetensorsFile::open("load_checkpoint", path);
//   if (!f.ok()) return f.status();
//   bool saved = f->metadata().contains("optimizer_state");
//   absl::Status s = f->load_into(targets, {.strict = false}, &report);
//
//   // Writing two files that belong together: both written and fsynced
//   // first, then renamed in the order the caller chooses.
//   absl::StatusOr<StagedFile> weights = io::stage_safetensors("save_gpt2", dir + "/model.safetensors", tensors);
//   if (!weights.ok()) return weights.status();
//   absl::StatusOr<StagedFile> config = stage_file("save_gpt2", dir + "/config.json", text);
//   if (!config.ok()) return config.status();   // removes the weights' temporary too
//   if (absl::Status s = weights->commit(); !s.ok()) return s;
//   return config->commit();
//
// Errors, atomicity and the cleanup of crash leftovers are save_safetensors's
// and load_into's (checkpoint.h, NOTE [ Writing a file atomically ] in
// src/core/atomic_file.cpp); messages start with the `op` given here.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "encore/checkpoint.h"
#include "src/core/atomic_file.h"

namespace encore::io {

// One safetensors file, opened once (O_RDONLY) and its header read and
// validated once, as load_safetensors validates it. Movable, not copyable;
// the descriptor closes with the object.
class SafetensorsFile {
 public:
  // `op` (a static string) starts every message. F64 entries are accepted
  // and read into float targets by load_into with convert_dtypes; without it
  // a targeted F64 entry is Unimplemented, as load_into(path, ...) says.
  [[nodiscard]] static absl::StatusOr<SafetensorsFile> open(const char* op, const std::string& path);
  SafetensorsFile(SafetensorsFile&&) noexcept;
  SafetensorsFile& operator=(SafetensorsFile&&) noexcept;
  ~SafetensorsFile();

  const std::map<std::string, std::string>& metadata() const;
  // Each tensor's name and shape, in the order of their data in the file.
  std::vector<std::pair<std::string, Shape>> shapes() const;
  // load_into(path, targets, options, report) on this file.
  [[nodiscard]] absl::Status load_into(const NamedTensors& targets, const LoadOptions& options,
                                       LoadReport* report = nullptr) const;

 private:
  struct State;
  explicit SafetensorsFile(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

// save_safetensors(path, tensors, metadata) up to its rename.
[[nodiscard]] absl::StatusOr<StagedFile> stage_safetensors(const char* op, const std::string& path,
                                                           const NamedTensors& tensors,
                                                           const std::map<std::string, std::string>& metadata = {});

}  // namespace encore::io
