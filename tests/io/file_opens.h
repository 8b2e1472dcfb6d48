// How many times a file is opened while a function runs, seen by inotify:
// a load that opens its file once reads one consistent file (NOTE [ One
// file per load ] in src/io/training_checkpoint.cpp).
//
//   EXPECT_EQ(testing::opens_of(path, [&] { ASSERT_TRUE(load(path).ok()); }), 1);
#pragma once

#include <sys/inotify.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <functional>
#include <string>

#include <gtest/gtest.h>

namespace encore::testing {

// Opens of `path` (any process, any flags) during fn(), or -1 (and a test
// failure) when inotify cannot watch it. IN_CLOSE is watched too: the kernel merges an event
// identical to the one before it, so open, open would count once, while
// open, close, open, close counts twice.
inline int opens_of(const std::string& path, const std::function<void()>& fn) {
  const int fd = ::inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
  if (fd < 0) {
    ADD_FAILURE() << "inotify_init1: " << std::strerror(errno);
    return -1;
  }
  if (::inotify_add_watch(fd, path.c_str(), IN_OPEN | IN_CLOSE) < 0) {
    ADD_FAILURE() << "inotify cannot watch " << path << ": " << std::strerror(errno);
    ::close(fd);
    return -1;
  }
  fn();
  int opens = 0;
  alignas(inotify_event) char buf[4096];
  for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) > 0;) {
    for (const char* p = buf; p < buf + n;) {
      const auto* e = reinterpret_cast<const inotify_event*>(p);
      if (e->mask & IN_OPEN) ++opens;
      p += sizeof(inotify_event) + e->len;
    }
  }
  ::close(fd);
  return opens;
}

}  // namespace encore::testing
