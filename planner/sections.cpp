// Builds sections, overlaps and cuts; see NOTE [ Sections ] in sections.h.
#include "planner/sections.h"

#include "planner/internal.h"

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <optional>
#include <vector>

namespace encore::planner::internal {
namespace {

struct Event {
  int64_t time;
  int is_start;  // ends before starts at equal times
  int32_t item;
};

std::vector<Event> item_events(absl::Span<const Buffer> buffers, const std::vector<SearchItem>& items) {
  std::vector<Event> events;
  events.reserve(2 * items.size());
  for (int32_t i = 0; i < static_cast<int32_t>(items.size()); ++i) {
    events.push_back({buffers[items[i].buffer].lower, 1, i});
    events.push_back({buffers[items[i].buffer].upper, 0, i});
  }
  std::sort(events.begin(), events.end(), [](const Event& a, const Event& b) {
    return a.time != b.time ? a.time < b.time : a.is_start < b.is_start;
  });
  return events;
}

// Assigns [first, last) to every item; returns the number of sections.
int32_t number_sections(const std::vector<Event>& events, std::vector<SearchItem>& items) {
  int32_t sections = 0;
  bool started_since_last = false;
  for (const Event& e : events) {
    if (e.is_start) {
      items[e.item].first = sections;
      started_since_last = true;
      continue;
    }
    if (started_since_last) ++sections;  // the live set just before this end
    started_since_last = false;
    items[e.item].last = sections;
  }
  return sections;
}

// Lists, for every item, the items live when it starts, and vice versa.
void find_overlaps(const std::vector<Event>& events, SectionProblem& p) {
  std::vector<int32_t> live, where(p.items.size(), -1);
  p.overlaps.assign(p.items.size(), {});
  for (const Event& e : events) {
    if (!e.is_start) {  // swap-remove from the live list
      where[live.back()] = where[e.item];
      live[where[e.item]] = live.back();
      live.pop_back();
      continue;
    }
    for (int32_t other : live) {
      p.overlaps[e.item].push_back(other);
      p.overlaps[other].push_back(e.item);
    }
    where[e.item] = static_cast<int32_t>(live.size());
    live.push_back(e.item);
  }
}

int64_t count_pairs(const std::vector<Event>& events) {
  int64_t pairs = 0, live = 0;
  for (const Event& e : events) {
    if (e.is_start) pairs += live++;
    else --live;
  }
  return pairs;
}

}  // namespace

// NOTE [ Grain ]
// Canonical offsets are 0 or align_up(t, a) for a top t of a buffer below;
// tops are offsets plus sizes. If every size is a multiple of g and every
// alignment a either divides g (align_up leaves multiples of g alone) or is a
// multiple of g (align_up lands on one), every canonical offset, top and peak
// is a multiple of g. So g starts as the gcd of the sizes, and an alignment
// that is neither lowers it to gcd(g, a). Lowering g can break an alignment
// accepted before (g = 12 accepts 4, then 18 lowers it to 6, which 4 neither
// divides nor is divided by), so the pass repeats until nothing changes;
// with powers of two, as plan_buffers asks, g is then a power of two and the
// second pass changes nothing. The gcd of sizes and alignments together
// (the rule before) is sound too but needlessly fine: sizes {192, 320} at
// alignment 1 give grain 64 here and 1 there, so a minimising search raised
// its floor one byte per refuted capacity instead of 64.
int64_t section_grain(absl::Span<const SearchItem> items) {
  int64_t g = 0;
  for (const SearchItem& item : items) g = std::gcd(g, item.size);
  if (g == 0) return 1;
  for (bool changed = true; changed;) {
    changed = false;
    for (const SearchItem& item : items) {
      const int64_t a = std::max<int64_t>(item.alignment, 1);
      if (g % a == 0 || a % g == 0) continue;
      g = std::gcd(g, a);
      changed = true;
    }
  }
  return g;
}

std::optional<SectionProblem> make_section_problem(absl::Span<const Buffer> buffers, int64_t max_pairs) {
  SectionProblem p;
  for (int32_t i = 0; i < static_cast<int32_t>(buffers.size()); ++i) {
    const Buffer& b = buffers[i];
    if (b.size == 0) continue;
    p.items.push_back({i, b.size, b.alignment, lifetime_length(b), 0, 0});
  }
  p.grain = section_grain(p.items);
  const std::vector<Event> events = item_events(buffers, p.items);
  if (count_pairs(events) > max_pairs) return std::nullopt;
  const int32_t sections = number_sections(events, p.items);
  int64_t memberships = 0;
  for (const SearchItem& item : p.items) memberships += item.last - item.first;
  if (memberships > max_pairs) return std::nullopt;
  find_overlaps(events, p);
  p.members.assign(sections, {});
  p.totals.assign(sections, 0);
  p.cuts.assign(std::max(sections - 1, 0), 0);
  for (int32_t i = 0; i < static_cast<int32_t>(p.items.size()); ++i) {
    for (int32_t s = p.items[i].first; s < p.items[i].last; ++s) {
      p.members[s].push_back(i);
      p.totals[s] += p.items[i].size;
      if (s + 1 < p.items[i].last) ++p.cuts[s];
    }
  }
  return p;
}

}  // namespace encore::planner::internal
