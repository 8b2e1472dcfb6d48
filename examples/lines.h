// The lines of a text file as token sequences, for training on sequences of
// varying length (examples/train_lines.cpp, bench/bucketed_bench.cpp). Each
// byte is a token; every line keeps its '\n', so a model learns where lines
// end. Lines longer than max_len bytes are cut to their first max_len.
//
//   absl::StatusOr<encore::examples::Lines> text = encore::examples::load_lines("/usr/share/dict/words", 33);
//   std::vector<std::vector<int64_t>> batch = text->sample(16, rng);   // 16 random lines
#pragma once

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "examples/text_file.h"

namespace encore::examples {

struct Lines {
  std::vector<std::vector<int64_t>> lines;   // token ids, each line with its '\n'; at least 2 ids each
  std::vector<unsigned char> vocab;          // id -> byte

  // `batch` lines drawn uniformly with replacement.
  std::vector<std::vector<int64_t>> sample(int64_t batch, std::mt19937_64& rng) const {
    std::uniform_int_distribution<size_t> pick(0, lines.size() - 1);
    std::vector<std::vector<int64_t>> out;
    for (int64_t b = 0; b < batch; ++b) out.push_back(lines[pick(rng)]);
    return out;
  }
};

// NotFound when the file cannot be opened; InvalidArgument when it is not a
// whole gzip or text file of at most kMaxInputBytes (text_file.h), or has fewer
// than 10 lines of at least one byte before the '\n', or max_len < 2.
inline absl::StatusOr<Lines> load_lines(const std::string& path, int64_t max_len) {
  if (max_len < 2) return absl::InvalidArgumentError("load_lines: max_len must be at least 2");
  absl::StatusOr<std::string> read = read_text_file(path);   // bounded; gzip or plain text
  if (!read.ok()) return read.status();
  const std::string& text = *read;
  int map[256];
  std::fill(map, map + 256, -1);
  Lines out;
  auto id_of = [&](unsigned char ch) {
    if (map[ch] < 0) {
      map[ch] = static_cast<int>(out.vocab.size());
      out.vocab.push_back(ch);
    }
    return static_cast<int64_t>(map[ch]);
  };
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    if (line.empty()) continue;
    std::vector<int64_t> ids;
    for (size_t i = 0; i < line.size() && static_cast<int64_t>(ids.size()) < max_len - 1; ++i) {
      ids.push_back(id_of(static_cast<unsigned char>(line[i])));
    }
    ids.push_back(id_of('\n'));
    out.lines.push_back(std::move(ids));
  }
  if (out.lines.size() < 10) return absl::InvalidArgumentError(path + " has fewer than 10 non-empty lines");
  return out;
}

}  // namespace encore::examples
