// validate() and check_buffers(): is a plan usable, is an input well formed.
#include <algorithm>
#include <cstdint>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "encore/planner.h"
#include "planner/internal.h"

namespace encore::planner {
namespace {

// Sizes and alignments are capped so that sums over a million buffers stay
// far from int64 overflow.
constexpr int64_t kMaxSize = int64_t{1} << 48;       // 256 TiB
constexpr int64_t kMaxAlignment = int64_t{1} << 40;  // 1 TiB

std::string describe(const Buffer& b, int64_t offset) {
  return absl::StrCat("'", b.id, "' (bytes [", offset, ", ", offset + b.size, "), live [", b.lower,
                      ", ", b.upper, "))");
}

absl::Status check_offsets(absl::Span<const Buffer> buffers, const Plan& plan) {
  if (plan.offsets.size() != buffers.size()) {
    return absl::InvalidArgumentError(absl::StrCat("plan has ", plan.offsets.size(),
                                                   " offsets for ", buffers.size(), " buffers"));
  }
  for (size_t i = 0; i < buffers.size(); ++i) {
    const Buffer& b = buffers[i];
    const int64_t offset = plan.offsets[i];
    if (offset < 0) {
      return absl::InvalidArgumentError(absl::StrCat("buffer '", b.id, "' has negative offset ", offset));
    }
    if (offset % b.alignment != 0) {
      return absl::InvalidArgumentError(absl::StrCat("buffer '", b.id, "' at offset ", offset,
                                                     " is not aligned to ", b.alignment));
    }
    int64_t end = 0;
    if (__builtin_add_overflow(offset, b.size, &end)) {
      return absl::InvalidArgumentError(absl::StrCat("buffer '", b.id, "' at offset ", offset, " of size ", b.size,
                                                     " ends above 2^63"));
    }
    if (end > plan.peak) {
      return absl::InvalidArgumentError(absl::StrCat("buffer '", b.id, "' ends at ", offset + b.size,
                                                     ", above the peak ", plan.peak));
    }
  }
  return absl::OkStatus();
}

struct Event {
  int64_t time;
  int is_start;  // ends sort before starts at equal times
  int32_t index;
};

// Starts and ends of the non-empty buffers (an empty one overlaps nothing).
std::vector<Event> sorted_events(absl::Span<const Buffer> buffers) {
  std::vector<Event> events;
  for (int32_t i = 0; i < static_cast<int32_t>(buffers.size()); ++i) {
    if (buffers[i].size == 0) continue;
    events.push_back({buffers[i].lower, 1, i});
    events.push_back({buffers[i].upper, 0, i});
  }
  std::sort(events.begin(), events.end(), [](const Event& a, const Event& b) {
    return a.time != b.time ? a.time < b.time : a.is_start < b.is_start;
  });
  return events;
}

}  // namespace

absl::Status check_buffers(absl::Span<const Buffer> buffers) {
  absl::flat_hash_map<std::string_view, size_t> first_index;
  first_index.reserve(buffers.size());
  for (size_t i = 0; i < buffers.size(); ++i) {
    std::string problem = internal::buffer_problem(buffers[i]);
    auto [it, inserted] = first_index.emplace(buffers[i].id, i);
    if (!inserted) problem = absl::StrCat("duplicate id (first at buffer ", it->second, ")");
    if (!problem.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("buffer ", i, " ('", buffers[i].id, "'): ", problem));
    }
  }
  return absl::OkStatus();
}

namespace internal {

std::string buffer_problem(const Buffer& b) {
  if (b.size < 0) return absl::StrCat("negative size ", b.size);
  if (b.size > kMaxSize) return absl::StrCat("size ", b.size, " is above 2^48");
  if (b.upper <= b.lower) return absl::StrCat("upper ", b.upper, " <= lower ", b.lower);
  if (b.alignment < 1 || b.alignment > kMaxAlignment || (b.alignment & (b.alignment - 1)) != 0) {
    return absl::StrCat("alignment ", b.alignment, " is not a power of two up to 2^40");
  }
  return "";
}

}  // namespace internal

// Sweeps time keeping the live buffers ordered by address. Before each
// insertion the live set is overlap-free, so comparing the new buffer with its
// two address neighbours finds any overlap.
absl::Status validate(absl::Span<const Buffer> buffers, const Plan& plan) {
  if (absl::Status status = check_offsets(buffers, plan); !status.ok()) return status;
  std::set<std::pair<int64_t, int32_t>> live;  // (offset, index)
  auto clash = [&](int32_t a, int32_t b) {
    return absl::InvalidArgumentError(absl::StrCat("buffers '", buffers[a].id, "' and '", buffers[b].id,
                                                   "' overlap: ", describe(buffers[a], plan.offsets[a]),
                                                   " and ", describe(buffers[b], plan.offsets[b])));
  };
  for (const Event& e : sorted_events(buffers)) {
    const std::pair<int64_t, int32_t> key{plan.offsets[e.index], e.index};
    if (!e.is_start) {
      live.erase(key);
      continue;
    }
    auto it = live.insert(key).first;
    if (auto next = std::next(it); next != live.end() && key.first + buffers[e.index].size > next->first) {
      return clash(e.index, next->second);
    }
    if (it != live.begin()) {
      auto prev = std::prev(it);
      if (prev->first + buffers[prev->second].size > key.first) return clash(prev->second, e.index);
    }
  }
  return absl::OkStatus();
}

}  // namespace encore::planner
