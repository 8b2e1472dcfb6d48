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

// NOTE [ Lower bound with alignment ]
// Every offset is a multiple of the smallest alignment `unit`, so the distance
// from a buffer to the next one above it is at least its size rounded up to
// `unit`. Only the top-most live buffer escapes that rounding, so at each time
// peak >= sum(rounded sizes) - max(rounding slack of a live buffer).
// Zero-size buffers take no memory and have no events; they still count for
// `unit` (their offsets are aligned too, but nothing rests on them).
int64_t lower_bound(absl::Span<const Buffer> buffers) {
  return internal::lower_bound_of(buffers, internal::time_ordered_events(buffers));
}

namespace internal {

int64_t lower_bound_of(absl::Span<const Buffer> buffers, absl::Span<const TimeEvent> events) {
  int64_t unit = 0;
  bool slack_anywhere = false;
  for (const Buffer& b : buffers) unit = unit == 0 ? b.alignment : std::min(unit, b.alignment);
  if (unit < 1) unit = 1;
  for (const Buffer& b : buffers) slack_anywhere |= (b.size & (unit - 1)) != 0;
  auto rounded = [&](int32_t i) { return align_up(buffers[i].size, unit); };

  __int128 live_bytes = 0, best = 0;  // sums of sizes may exceed int64: saturated below
  if (!slack_anywhere) {  // every size a multiple of unit: the plain maximum of live bytes
    for (size_t e = 0; e < events.size(); ++e) {
      const TimeEvent& event = events[e];
      live_bytes += event.is_alloc ? buffers[event.index].size : -buffers[event.index].size;
      if (event.is_alloc && (e + 1 == events.size() || events[e + 1].time != event.time)) {
        best = std::max(best, live_bytes);
      }
    }
  } else {
    std::vector<char> live(buffers.size(), 0);
    std::priority_queue<std::pair<int64_t, int32_t>> slack;  // lazily pruned max-heap
    for (size_t e = 0; e < events.size(); ++e) {
      const TimeEvent& event = events[e];
      live[event.index] = static_cast<char>(event.is_alloc);
      live_bytes += event.is_alloc ? rounded(event.index) : -rounded(event.index);
      if (event.is_alloc) slack.push({rounded(event.index) - buffers[event.index].size, event.index});
      const bool last_at_time = e + 1 == events.size() || events[e + 1].time != event.time;
      if (!event.is_alloc || !last_at_time) continue;
      while (!slack.empty() && !live[slack.top().second]) slack.pop();
      best = std::max(best, live_bytes - (slack.empty() ? 0 : slack.top().first));
    }
  }
  return static_cast<int64_t>(std::min<__int128>(best, std::numeric_limits<int64_t>::max()));
}

}  // namespace internal
}  // namespace encore::planner
