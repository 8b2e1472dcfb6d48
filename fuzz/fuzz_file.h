// A fuzz input as a file: the loaders under test take a path, so each input
// is written to one anonymous in-memory file (memfd) named by
// /proc/self/fd/<n>. No disk, nothing left behind.
//
//   extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
//     static encore::fuzz::FuzzFile file;
//     (void)encore::load_safetensors(file.write(data, size));
//     return 0;
//   }
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace encore::fuzz {

class FuzzFile {
 public:
  FuzzFile() : fd_(::memfd_create("encore_fuzz", MFD_CLOEXEC)) {
    if (fd_ < 0) {
      std::perror("memfd_create");
      std::abort();   // the harness cannot run at all: not a finding in encore
    }
    path_ = "/proc/self/fd/" + std::to_string(fd_);
  }
  FuzzFile(const FuzzFile&) = delete;
  FuzzFile& operator=(const FuzzFile&) = delete;
  ~FuzzFile() { ::close(fd_); }

  // Replaces the file's contents with [data, data + size); returns its path.
  const std::string& write(const uint8_t* data, size_t size) {
    if (::ftruncate(fd_, 0) != 0 || (size > 0 && ::pwrite(fd_, data, size, 0) != static_cast<ssize_t>(size))) {
      std::perror("memfd write");
      std::abort();
    }
    return path_;
  }

 private:
  int fd_;
  std::string path_;
};

}  // namespace encore::fuzz
