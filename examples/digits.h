// scikit-learn's handwritten digits (1,797 8x8 grey images of 0-9, from the
// UCI optical-recognition set), read from the file Debian's python3-sklearn
// ships (sklearn/datasets/data/digits.csv.gz; ./run copies it to
// data/digits.csv.gz), for examples/train_cnn and bench/. Each line is 64
// pixel values 0..16, row by row, then the label 0..9; gzip or plain text.
//
//   absl::StatusOr<encore::examples::Digits> d = encore::examples::load_digits("data/digits.csv.gz");
//   encore::examples::Split s = d->split(0.2, /*seed=*/0);      // 1,438 train, 359 test images
//   encore::Tensor x = d->images(s.train, 0, 32);               // [32, 1, 8, 8] f32 in [0, 1]
//   encore::Tensor y = d->labels(s.train, 0, 32);               // [32] i64
#pragma once

#include <zlib.h>

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "encore/tensor.h"
#include "examples/text_file.h"

namespace encore::examples {

// Image indices of a train/test split.
struct Split {
  std::vector<int64_t> train, test;
};

struct Digits {
  static constexpr int64_t kSide = 8;
  static constexpr int64_t kPixels = kSide * kSide;
  static constexpr int64_t kClasses = 10;
  std::vector<float> pixels;     // [count, 64], each value / 16, so in [0, 1]
  std::vector<int64_t> label;    // [count], 0..9

  int64_t count() const { return static_cast<int64_t>(label.size()); }

  // A shuffled split (the same for the same seed): round(count * test_fraction) test images.
  Split split(double test_fraction, uint64_t seed) const {
    std::vector<int64_t> order(label.size());
    std::iota(order.begin(), order.end(), 0);
    std::mt19937_64 rng(seed);
    std::shuffle(order.begin(), order.end(), rng);
    const auto n_test = static_cast<size_t>(static_cast<double>(order.size()) * test_fraction + 0.5);
    Split s;
    s.test.assign(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(n_test));
    s.train.assign(order.begin() + static_cast<std::ptrdiff_t>(n_test), order.end());
    return s;
  }

  // Images idx[begin, begin + n) as a CPU tensor [n, 1, 8, 8] f32.
  Tensor images(const std::vector<int64_t>& idx, size_t begin, size_t n) const {
    std::vector<float> out;
    out.reserve(n * kPixels);
    for (size_t i = begin; i < begin + n; ++i) {
      const float* p = &pixels[static_cast<size_t>(idx[i] * kPixels)];
      out.insert(out.end(), p, p + kPixels);
    }
    return from_vector<float>(out, {static_cast<int64_t>(n), 1, kSide, kSide});
  }
  // Their labels, [n] i64.
  Tensor labels(const std::vector<int64_t>& idx, size_t begin, size_t n) const {
    std::vector<int64_t> out;
    for (size_t i = begin; i < begin + n; ++i) out.push_back(label[static_cast<size_t>(idx[i])]);
    return from_vector<int64_t>(out, {static_cast<int64_t>(n)});
  }
};

// NotFound when the file cannot be opened; InvalidArgument when it is not a
// whole gzip or text file of at most kMaxInputBytes (text_file.h), naming the line
// when a line is not 65 integers (pixels 0..16, a label 0..9) or the file
// holds no image.
inline absl::StatusOr<Digits> load_digits(const std::string& path) {
  absl::StatusOr<std::string> read = read_text_file(path);   // gzip or plain text
  if (!read.ok() && read.status().code() == absl::StatusCode::kNotFound) {
    return absl::NotFoundError(absl::StrCat(read.status().message(),
                                            " (./run fetches it: scikit-learn's digits.csv.gz)"));
  }
  if (!read.ok()) return read.status();
  const std::string& text = *read;
  Digits d;
  int64_t line_no = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_no;
    if (line.empty()) continue;
    std::vector<absl::string_view> fields = absl::StrSplit(line, ',');
    auto bad = [&](absl::string_view why) {
      return absl::InvalidArgumentError(absl::StrCat(path, ":", line_no, ": ", why));
    };
    if (fields.size() != static_cast<size_t>(Digits::kPixels + 1)) {
      return bad(absl::StrCat("expected ", Digits::kPixels + 1, " values, found ", fields.size()));
    }
    for (size_t i = 0; i < fields.size(); ++i) {
      int v = 0;
      const bool is_label = i == static_cast<size_t>(Digits::kPixels);
      if (!absl::SimpleAtoi(fields[i], &v) || v < 0 || v > (is_label ? 9 : 16)) {
        return bad(absl::StrCat("value ", i + 1, " (\"", fields[i], "\") is not ",
                                is_label ? "a label 0..9" : "a pixel 0..16"));
      }
      if (is_label) {
        d.label.push_back(v);
      } else {
        d.pixels.push_back(static_cast<float>(v) / 16.0f);
      }
    }
  }
  if (d.label.empty()) return absl::InvalidArgumentError(absl::StrCat(path, ": no images"));
  return d;
}

}  // namespace encore::examples
