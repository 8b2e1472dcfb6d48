// lower_bound(): the most bytes live at one time step. No plan can beat it.
#include <algorithm>
#include <cstdint>
#include <limits>
#include <queue>
#include <utility>
#include <vector>

#include "encore/planner.h"
#include "planner/internal.h"

namespace encore::planner {
namespace {

// One end of a lifetime. At equal times ends sort before starts: a buffer
// that stops being live at t and one that starts at t never coexist.
struct Event {
  int64_t time;
  int is_start;  // 0 = end, 1 = start
  int32_t index;
  bool operator<(const Event& other) const {
    if (time != other.time) return time < other.time;
    return is_start < other.is_start;
  }
};

std::vector<Event> make_events(absl::Span<const Buffer> buffers) {
  std::vector<Event> events;
  events.reserve(2 * buffers.size());
  for (int32_t i = 0; i < static_cast<int32_t>(buffers.size()); ++i) {
    events.push_back({buffers[i].lower, 1, i});
    events.push_back({buffers[i].upper, 0, i});
  }
  std::sort(events.begin(), events.end());
  return events;
}

}  // namespace

// NOTE [ Lower bound with alignment ]
// Every offset is a multiple of the smallest alignment `unit`, so the distance
// from a buffer to the next one above it is at least its size rounded up to
// `unit`. Only the top-most live buffer escapes that rounding, so at each time
// peak >= sum(rounded sizes) - max(rounding slack of a live buffer).
int64_t lower_bound(absl::Span<const Buffer> buffers) {
  int64_t unit = 0;
  for (const Buffer& b : buffers) unit = unit == 0 ? b.alignment : std::min(unit, b.alignment);
  if (unit < 1) unit = 1;
  auto rounded = [&](int32_t i) { return internal::align_up(buffers[i].size, unit); };

  std::vector<char> live(buffers.size(), 0);
  std::priority_queue<std::pair<int64_t, int32_t>> slack;  // lazily pruned max-heap
  __int128 live_bytes = 0, best = 0;  // sums of sizes may exceed int64: saturated below
  const std::vector<Event> events = make_events(buffers);
  for (size_t e = 0; e < events.size(); ++e) {
    const Event& event = events[e];
    live[event.index] = static_cast<char>(event.is_start);
    live_bytes += event.is_start ? rounded(event.index) : -rounded(event.index);
    if (event.is_start && unit > 1) slack.push({rounded(event.index) - buffers[event.index].size, event.index});
    const bool last_at_time = e + 1 == events.size() || events[e + 1].time != event.time;
    if (!event.is_start || !last_at_time) continue;
    while (!slack.empty() && !live[slack.top().second]) slack.pop();
    best = std::max(best, live_bytes - (slack.empty() ? 0 : slack.top().first));
  }
  return static_cast<int64_t>(std::min<__int128>(best, std::numeric_limits<int64_t>::max()));
}

}  // namespace encore::planner
