// `exact`: proves or improves on a heuristic plan.
//
// The driver (plan_exact) searches for the smallest capacity that admits a
// plan, between the lower bound and the best peak known so far, asking a
// decision search "is there a plan within C bytes?" for each probe.
//
// NOTE [ Canonical search ]
// The decision search follows MiniMalloc (Moffitt, ASPLOS '23 vol. 4, 2024). Any plan can
// be pushed down until every buffer rests at offset 0 or on (the aligned top
// of) a buffer below it that overlaps it in time; such canonical plans are
// what the search enumerates. It places buffers one at a time in order of
// non-decreasing offset, each at the lowest offset left free for it by the
// buffers already placed (its "min offset"), and prunes with:
//   - canonical order: offsets never decrease; at equal offsets a fixed rank
//     decides, so each canonical plan is built in one order only;
//   - dominance: a buffer placed at or above the top some unplaced buffer
//     could reach leaves a gap that buffer could have used; skipped;
//   - section inference: in each section (sections.h), the unplaced bytes
//     stacked on the section's floor must fit under the capacity;
//   - decomposition: once no unplaced buffer spans a section boundary, the
//     two sides are solved separately.
// Candidates are tried by min offset, ties by a static rank; several static
// rankings are tried round-robin with growing node limits.
#include <algorithm>
#include <array>
#include <cstdint>
#include <deque>
#include <limits>
#include <utility>
#include <vector>

#include "encore/planner.h"
#include "planner/internal.h"
#include "planner/sections.h"

namespace encore::planner::internal {
namespace {

constexpr int64_t kUnplaced = -1;
// Beyond this many overlapping pairs the search is skipped (memory, time).
constexpr int64_t kMaxPairs = 4'000'000;
// Beyond this many buffers too: the search recurses once per placed buffer,
// about 250 bytes of stack each, so this keeps it within 2 MiB.
constexpr size_t kMaxItems = 8'000;

// Static rankings, as priority lists of keys, all larger-first:
// W = lifetime width, A = area (bytes x width), T = the largest section
// total the buffer takes part in. They are MiniMalloc's three, section total
// first: buffers in the most crowded sections are the hardest to place.
constexpr std::array<absl::string_view, 3> kRankings = {"TWA", "TAW", "WAT"};

enum class Outcome { kFound, kInfeasible, kOutOfNodes, kOutOfTime };

struct Partition {
  int32_t first_section;
  int32_t last_section;  // one past
  std::vector<int32_t> items;
};

struct Candidate {
  int64_t offset;  // the item's min offset when the list was made
  int32_t rank;
  int32_t item;
  bool operator<(const Candidate& o) const { return offset != o.offset ? offset < o.offset : rank < o.rank; }
};

class CapacitySearch {
 public:
  CapacitySearch(const SectionProblem& problem, int64_t capacity, const Deadline& deadline)
      : p_(problem), capacity_(capacity), deadline_(deadline) {}

  Outcome solve(absl::string_view ranking, int64_t node_limit);
  // Item offsets of the plan found by the last successful solve().
  const std::vector<int64_t>& solution() const { return solution_; }

 private:
  Outcome solve_partition(const Partition& partition, int depth);
  Outcome search(const Partition& partition, const std::vector<Candidate>& previous, const Candidate& last,
                 int depth);
  Outcome try_candidate(const Partition& partition, const std::vector<Candidate>& ordering, const Candidate& c,
                        int depth);
  Outcome split_and_solve(const Partition& partition, std::vector<int32_t>& cutpoints, int depth);
  void make_ordering(const std::vector<Candidate>& previous, std::vector<Candidate>& ordering);
  bool place(int32_t item, int64_t offset);
  void unplace(size_t mark, int32_t item);
  bool section_fits(int32_t section) const;
  std::vector<int32_t> rank_items(const std::vector<int32_t>& items) const;
  std::vector<Candidate>& scratch(int depth);
  Outcome spend_node();

  const SectionProblem& p_;
  const int64_t capacity_;
  const Deadline& deadline_;
  absl::string_view ranking_;
  int64_t nodes_left_ = 0;
  int64_t nodes_ = 0;

  std::vector<int64_t> offset_, min_offset_, solution_;  // per item
  std::vector<int64_t> total_;                           // per section: unplaced bytes
  std::vector<int32_t> cuts_;                            // per section boundary: unplaced items across
  std::vector<std::pair<int32_t, int64_t>> trail_;       // (item, previous min offset), for undo
  std::vector<uint32_t> stamp_;                          // per section, dedups `affected_`
  uint32_t epoch_ = 0;
  std::vector<std::pair<int32_t, int64_t>> affected_;    // (section, min offset of a member)
  std::vector<Candidate> moved_;
  std::deque<std::vector<Candidate>> scratch_;           // one ordering per recursion depth
};

Outcome CapacitySearch::solve(absl::string_view ranking, int64_t node_limit) {
  ranking_ = ranking;
  nodes_left_ = node_limit;
  const size_t n = p_.items.size(), sections = p_.totals.size();
  offset_.assign(n, kUnplaced);
  min_offset_.assign(n, 0);
  solution_.assign(n, 0);
  total_ = p_.totals;
  cuts_ = p_.cuts;
  stamp_.assign(sections, 0);
  for (int64_t total : total_) {
    if (total > capacity_) return Outcome::kInfeasible;
  }
  // Split the problem where no buffer spans a section boundary.
  Partition partition{0, static_cast<int32_t>(sections), {}};
  std::vector<int32_t> cutpoints;
  for (int32_t s = 0; s + 1 < static_cast<int32_t>(sections); ++s) {
    if (cuts_[s] == 0) cutpoints.push_back(s + 1);
  }
  for (int32_t i = 0; i < static_cast<int32_t>(n); ++i) partition.items.push_back(i);
  return split_and_solve(partition, cutpoints, 0);
}

// Solves each piece of `partition` between consecutive cutpoints on its own.
Outcome CapacitySearch::split_and_solve(const Partition& partition, std::vector<int32_t>& cutpoints, int depth) {
  cutpoints.insert(cutpoints.begin(), partition.first_section);
  cutpoints.push_back(partition.last_section);
  for (size_t k = 0; k + 1 < cutpoints.size(); ++k) {
    Partition piece{cutpoints[k], cutpoints[k + 1], {}};
    for (int32_t item : partition.items) {
      const SearchItem& it = p_.items[item];
      if (offset_[item] == kUnplaced && it.first < piece.last_section && piece.first_section < it.last) {
        piece.items.push_back(item);
      }
    }
    if (piece.items.empty()) continue;
    if (Outcome r = solve_partition(piece, depth + 1); r != Outcome::kFound) return r;
  }
  return Outcome::kFound;
}

std::vector<int32_t> CapacitySearch::rank_items(const std::vector<int32_t>& items) const {
  struct Key {
    uint64_t width;
    __int128 area;
    int64_t total;
    int32_t item;
  };
  std::vector<Key> keys;
  keys.reserve(items.size());
  for (int32_t item : items) {
    const SearchItem& it = p_.items[item];
    int64_t total = 0;
    for (int32_t s = it.first; s < it.last; ++s) total = std::max(total, total_[s]);
    keys.push_back({it.width, static_cast<__int128>(it.size) * it.width, total, item});
  }
  std::stable_sort(keys.begin(), keys.end(), [&](const Key& a, const Key& b) {
    for (char c : ranking_) {
      if (c == 'W' && a.width != b.width) return a.width > b.width;
      if (c == 'A' && a.area != b.area) return a.area > b.area;
      if (c == 'T' && a.total != b.total) return a.total > b.total;
    }
    return false;
  });
  std::vector<int32_t> ranked;
  for (const Key& k : keys) ranked.push_back(k.item);
  return ranked;
}

Outcome CapacitySearch::solve_partition(const Partition& partition, int depth) {
  std::vector<Candidate> candidates;
  const std::vector<int32_t> ranked = rank_items(partition.items);
  for (int32_t rank = 0; rank < static_cast<int32_t>(ranked.size()); ++rank) {
    candidates.push_back({min_offset_[ranked[rank]], rank, ranked[rank]});
  }
  std::sort(candidates.begin(), candidates.end());
  return search(partition, candidates, Candidate{0, -1, -1}, depth);
}

// Counts a node (a search call or a placement attempt) against the node
// limit and, every 256 nodes, checks the clock. kFound means "carry on".
Outcome CapacitySearch::spend_node() {
  if (--nodes_left_ < 0) return Outcome::kOutOfNodes;
  if ((++nodes_ & 255) == 0 && deadline_.expired()) return Outcome::kOutOfTime;
  return Outcome::kFound;
}

std::vector<Candidate>& CapacitySearch::scratch(int depth) {
  while (static_cast<int>(scratch_.size()) <= depth) scratch_.emplace_back();
  return scratch_[depth];
}

// The unplaced candidates of `previous` (sorted) by their current min offset,
// then rank. Only buffers whose min offset rose move, so merge them back in.
void CapacitySearch::make_ordering(const std::vector<Candidate>& previous, std::vector<Candidate>& ordering) {
  ordering.clear();
  moved_.clear();
  for (const Candidate& c : previous) {
    if (offset_[c.item] != kUnplaced) continue;
    if (min_offset_[c.item] == c.offset) {
      ordering.push_back(c);
    } else {
      moved_.push_back({min_offset_[c.item], c.rank, c.item});
    }
  }
  std::sort(moved_.begin(), moved_.end());
  const size_t middle = ordering.size();
  ordering.insert(ordering.end(), moved_.begin(), moved_.end());
  std::inplace_merge(ordering.begin(), ordering.begin() + middle, ordering.end());
}

// One node of the depth-first search: `last` is the candidate placed last in
// this partition; every candidate placed below must not precede it.
Outcome CapacitySearch::search(const Partition& partition, const std::vector<Candidate>& previous,
                               const Candidate& last, int depth) {
  if (const Outcome spent = spend_node(); spent != Outcome::kFound) return spent;
  std::vector<Candidate>& ordering = scratch(depth);
  make_ordering(previous, ordering);
  if (ordering.empty()) {  // a leaf: every buffer of the partition is placed
    for (int32_t item : partition.items) solution_[item] = offset_[item];
    return Outcome::kFound;
  }
  // NOTE [ Section inference at a node ]
  // Buffers placed from here on sit at or above the candidate's offset, and
  // those of one section are stacked, so a candidate at offset o is only
  // viable if o + (unplaced bytes of every section) <= capacity: one bound
  // for all candidates. Dominance bounds o by the lowest reachable top.
  int64_t max_total = 0, min_top = std::numeric_limits<int64_t>::max();
  for (int32_t s = partition.first_section; s < partition.last_section; ++s) max_total = std::max(max_total, total_[s]);
  for (const Candidate& c : ordering) min_top = std::min(min_top, c.offset + p_.items[c.item].size);
  const int64_t highest = std::min(capacity_ - max_total, min_top - 1);
  for (const Candidate& c : ordering) {
    if (c.offset > highest) break;
    if (c < last) continue;  // not canonical
    if (Outcome r = try_candidate(partition, ordering, c, depth); r != Outcome::kInfeasible) return r;
  }
  return Outcome::kInfeasible;
}

Outcome CapacitySearch::try_candidate(const Partition& partition, const std::vector<Candidate>& ordering,
                                      const Candidate& c, int depth) {
  if (const Outcome spent = spend_node(); spent != Outcome::kFound) return spent;
  const size_t mark = trail_.size();
  Outcome result = Outcome::kInfeasible;
  if (place(c.item, c.offset)) {
    solution_[c.item] = c.offset;  // a leaf of a later split piece records only its own items
    const SearchItem& it = p_.items[c.item];
    std::vector<int32_t> cutpoints;
    for (int32_t s = it.first; s + 1 < it.last; ++s) {
      if (--cuts_[s] == 0) cutpoints.push_back(s + 1);
    }
    result = cutpoints.empty() ? search(partition, ordering, c, depth + 1)
                               : split_and_solve(partition, cutpoints, depth);
    for (int32_t s = it.first; s + 1 < it.last; ++s) ++cuts_[s];
  }
  unplace(mark, c.item);
  return result;
}

// Places `item` at `offset` and raises the min offsets of the unplaced
// buffers it overlaps. False if a section whose buffers had to move up can
// no longer hold its unplaced bytes under the capacity (undo with unplace).
bool CapacitySearch::place(int32_t item, int64_t offset) {
  const SearchItem& it = p_.items[item];
  const int64_t top = offset + it.size;
  offset_[item] = offset;
  for (int32_t s = it.first; s < it.last; ++s) total_[s] -= it.size;
  ++epoch_;
  affected_.clear();
  for (int32_t other : p_.overlaps[item]) {
    if (offset_[other] != kUnplaced) continue;
    const int64_t raised = align_up(top, p_.items[other].alignment);
    if (min_offset_[other] >= raised) continue;
    trail_.emplace_back(other, min_offset_[other]);
    min_offset_[other] = raised;
    for (int32_t s = p_.items[other].first; s < p_.items[other].last; ++s) {
      if (stamp_[s] == epoch_) continue;
      stamp_[s] = epoch_;
      affected_.emplace_back(s, raised);
    }
  }
  for (const auto& [s, witness] : affected_) {
    if (witness + total_[s] > capacity_ && !section_fits(s)) return false;
  }
  return true;
}

// Can the unplaced buffers of `section` still be stacked from the lowest
// min offset among them up to the capacity?
bool CapacitySearch::section_fits(int32_t section) const {
  for (int32_t item : p_.members[section]) {
    if (offset_[item] == kUnplaced && min_offset_[item] + total_[section] <= capacity_) return true;
  }
  return false;
}

void CapacitySearch::unplace(size_t mark, int32_t item) {
  while (trail_.size() > mark) {
    min_offset_[trail_.back().first] = trail_.back().second;
    trail_.pop_back();
  }
  const SearchItem& it = p_.items[item];
  for (int32_t s = it.first; s < it.last; ++s) total_[s] += it.size;
  offset_[item] = kUnplaced;
}

// Is there a plan within `capacity`? Tries each ranking with `node_limit`.
Outcome decide(const SectionProblem& problem, int64_t capacity, int64_t node_limit, const Deadline& deadline,
               std::vector<int64_t>* item_offsets) {
  CapacitySearch search(problem, capacity, deadline);
  for (absl::string_view ranking : kRankings) {
    const Outcome outcome = search.solve(ranking, node_limit);
    if (outcome == Outcome::kFound) *item_offsets = search.solution();
    if (outcome != Outcome::kOutOfNodes) return outcome;
  }
  return Outcome::kOutOfNodes;
}

Plan to_plan(const SectionProblem& problem, absl::Span<const Buffer> buffers, const std::vector<int64_t>& offsets) {
  Plan plan;
  plan.offsets.assign(buffers.size(), 0);
  for (size_t i = 0; i < problem.items.size(); ++i) plan.offsets[problem.items[i].buffer] = offsets[i];
  plan.peak = peak_of(buffers, plan.offsets);
  return plan;
}

// NOTE [ Capacity search ]
// A plan at the proven floor (the lower bound, or one grain above the largest
// capacity proven infeasible) is optimal, and on real problems it is often
// reachable, so each round first asks for one there, trying every ranking
// with the round's node limit (MiniMalloc's round robin). Then it bisects
// between the floor and the best peak found, with a few cheaper probes. A
// probe that runs out of nodes proves nothing and counts as infeasible for the
// rest of the round. The node limit doubles every round until the floor is
// reached or the deadline passes. Capacities are multiples of the grain, as
// canonical peaks are.
class CapacityDriver {
 public:
  CapacityDriver(const SectionProblem& problem, absl::Span<const Buffer> buffers, Plan start,
                 const Deadline& deadline)
      : problem_(problem), buffers_(buffers), best_(std::move(start)), deadline_(deadline) {
    floor_ = round_up(lower_bound(buffers));
  }

  Plan run() {
    for (int64_t limit = std::max<int64_t>(problem_.items.size(), 64); best_.peak > floor_; limit *= 2) {
      const Outcome at_floor = probe(floor_, limit);
      if (at_floor == Outcome::kFound || at_floor == Outcome::kOutOfTime) break;
      int64_t lo = floor_, hi = best_.peak - grain();
      for (int probes = 0; probes < kProbesPerRound && lo <= hi; ++probes) {
        const int64_t mid = lo + (hi - lo) / grain() / 2 * grain();
        const Outcome outcome = probe(mid, limit / kBisectionShare);
        if (outcome == Outcome::kOutOfTime) return std::move(best_);
        if (outcome == Outcome::kFound) hi = best_.peak - grain();
        if (outcome != Outcome::kFound) lo = mid + grain();
      }
    }
    return std::move(best_);
  }

 private:
  static constexpr int kProbesPerRound = 2;
  static constexpr int64_t kBisectionShare = 4;  // a bisection probe gets 1/4 of the round's limit

  int64_t grain() const { return problem_.grain; }
  int64_t round_up(int64_t bytes) const { return (bytes + grain() - 1) / grain() * grain(); }

  // Asks for a plan within `capacity`; keeps it if found, raises the floor if
  // none can exist.
  Outcome probe(int64_t capacity, int64_t node_limit) {
    std::vector<int64_t> offsets;
    const Outcome outcome = decide(problem_, capacity, node_limit, deadline_, &offsets);
    if (outcome == Outcome::kFound) best_ = to_plan(problem_, buffers_, offsets);
    if (outcome == Outcome::kInfeasible) floor_ = std::max(floor_, capacity + grain());
    return outcome;
  }

  const SectionProblem& problem_;
  absl::Span<const Buffer> buffers_;
  Plan best_;
  const Deadline& deadline_;
  int64_t floor_;  // no plan has a smaller peak
};

}  // namespace

Plan plan_exact(absl::Span<const Buffer> buffers, Plan start, const Deadline& deadline) {
  if (buffers.size() > kMaxItems) return start;
  const std::optional<SectionProblem> problem = make_section_problem(buffers, kMaxPairs);
  if (!problem) return start;
  return CapacityDriver(*problem, buffers, std::move(start), deadline).run();
}

}  // namespace encore::planner::internal
