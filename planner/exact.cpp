// `exact`: proves or improves on a heuristic plan.
//
// The driver (CapacityDriver) asks a decision search "is there a plan within
// C bytes?" for capacities between the proven floor and the best peak known,
// or for one given capacity. Each answer is a plan, a proof that none exists,
// or "out of nodes" (no answer yet; asked again with a larger node limit).
// Between rounds, band repair improves the best plan by searching again
// above bands of it (NOTE [ Band repair ]); it supplies plans, never proofs.
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
//   - hatless pruning: a buffer whose placement raises no unplaced buffer's
//     min offset changes nothing for the others; if the rest fails after
//     it, every later candidate fails too (NOTE [ Hatless placements ]);
//   - section inference: the unplaced buffers of a section (sections.h) are
//     stacked, each at or above its min offset, like jobs with release times
//     on one machine: for every h, those released at h or later must fit in
//     [h, capacity). One bound per node: o + (unplaced bytes of a section)
//     <= capacity for the candidate's offset o;
//   - deadlines: a tight section bounds the tops of its members, and the
//     other sections of a bounded buffer are checked with those bounds
//     (NOTE [ Deadlines ]);
//   - decomposition: once no unplaced buffer spans a section boundary, the
//     two sides are solved separately;
//   - a failure memo (NOTE [ Failure memo ]): a state proved hopeless is not
//     searched again, however it was reached.
// Candidates are tried by min offset, ties by a static rank; several static
// rankings are tried round-robin with growing node limits, each first in
// dives that may leave the first choice only a few times
// (NOTE [ Limited discrepancy dives ]).
#include <algorithm>
#include <array>
#include <cstdint>
#include <deque>
#include <limits>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "encore/planner.h"
#include "planner/internal.h"
#include "planner/sections.h"

namespace encore::planner::internal {
namespace {

constexpr int64_t kUnplaced = -1;
// Beyond this many overlapping pairs the search is skipped (memory, time).
constexpr int64_t kMaxPairs = 4'000'000;
// The failure memo stops growing here (about 40 bytes an entry).
constexpr size_t kMaxMemoEntries = size_t{1} << 20;
// Sections checked after one placement, at most (NOTE [ Deadlines ]).
constexpr size_t kMaxChecksPerPlacement = 64;

// Static rankings, as priority lists of keys: W = lifetime width, A = area
// (bytes x width), T = the largest section total the buffer takes part in,
// Z = size, all larger first; S = start (the first section), earlier first;
// R = end (the last section), later first.
//
// NOTE [ Rankings in time order ]
// The rank only orders candidates at equal offsets, but that decides which
// plan each dive builds. MiniMalloc's three (TWA, TAW, WAT) and area first
// (AWT) fill a level by size; on minimalloc_like_problem (synthetic.h), the
// files' character, each fits 5-8 of seeds 1-30 in 0.5 s and together 8. A
// ranking led by the start (S) or the end (R) fills each level from one end
// of time to the other, so a choice at a level is made next to the one
// before it rather than anywhere in time: SAW alone fits 15, RAW 13, and
// they fit different ones. The eight below, time-ordered ones first, fit
// 50-52 of seeds 1-100 at 2^20 in 1 s where the four of before fit 29 (40
// with the dives below); the challenging files and tests/planner's grid stay
// fast (bench/RESULTS.md, issue 20 sixth pass).
constexpr std::array<absl::string_view, 8> kRankings = {"SAW", "RAW", "TWA", "SWA", "RWA", "WAT", "SZ", "RZ"};

// NOTE [ Limited discrepancy dives ]
// A probe first runs, under every ranking, dives that may take a candidate
// other than the first viable one (one whose placement passes the section
// checks) at most d times on the path, for d = 0 .. kDiveDiscrepancies - 1,
// and only then the complete search (Harvey and Ginsberg's limited
// discrepancy search). Depth-first search spends its nodes below the first
// choices and never revisits them; on minimalloc_like_problem the plans
// found lie a few choices away from the ranking's own, anywhere on the path.
// A subtree cut short for want of discrepancies proves nothing: it is not
// recorded in the failure memo and a dive that cut any returns kOutOfNodes.
// With the rankings above, 52-54 of seeds 1-100 fit in 1 s instead of 50
// (with MiniMalloc's four: 40 instead of 29). Only the floor and target
// probes dive (NOTE [ Capacity search ]).
constexpr int64_t kDiveDiscrepancies = 4;
constexpr int64_t kNoDiscrepancyLimit = std::numeric_limits<int64_t>::max();

// kCut: a child skipped for want of discrepancies (never leaves search()).
enum class Outcome { kFound, kInfeasible, kOutOfNodes, kOutOfTime, kCut };

struct Partition {
  int32_t first_section;
  int32_t last_section;  // one past
  std::vector<int32_t> items;
  uint64_t ranks = 0;    // a fingerprint of the items' ranks, NOTE [ Failure memo ]
};

struct Candidate {
  int64_t offset;  // the item's min offset when the list was made
  int32_t rank;
  int32_t item;
  bool operator<(const Candidate& o) const { return offset != o.offset ? offset < o.offset : rank < o.rank; }
};

// splitmix64's finalizer: a well-mixed 64-bit function of its input.
uint64_t mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// NOTE [ Failure memo ]
// What the rest of the search can do depends only on which buffers are
// placed and on the min offsets of the others (their offsets matter no
// further), on the partition being solved, and on the canonical constraint
// left by the last placement: offsets >= o, ranks above r at o. Two paths
// that stack the same buffers differently but leave the same min offsets
// (A below B or B below A, same top) reach the same state. A state that
// failed under (capacity C, o, r) fails again under any C' <= C and any
// constraint at least as strict: o' > o, or o' == o with r' >= r in the
// same ranking (r = -1, a partition's start, allows every rank; ranks are
// made afresh for each partition, so a ranking is identified by a
// fingerprint of the ranks it gave). The deadlines in force (max_top_) are
// not in the key: two paths to a state may carry different ones, but each
// holds in every completion of the state, the pieces of a split included
// (NOTE [ Deadlines ]), so a failure proved under one path's deadlines is
// a failure of the state. States are
// keyed by 128 bits of Zobrist-style hashes, updated as buffers are placed
// and min offsets move; a wrong match would need a 128-bit collision.
struct StateKey {
  uint64_t a, b;
  bool operator==(const StateKey& o) const { return a == o.a && b == o.b; }
  template <typename H>
  friend H AbslHashValue(H h, const StateKey& k) {
    return H::combine(std::move(h), k.a, k.b);
  }
};

struct Failure {
  int64_t capacity;
  int64_t offset;  // the canonical constraint it failed under
  int32_t rank;    // -1: any rank at `offset`
  uint64_t ranks;  // the ranking `rank` belongs to (Partition::ranks)
};

class FailureMemo {
 public:
  bool covers(const StateKey& key, const Failure& state) const {
    auto it = failed_.find(key);
    if (it == failed_.end()) return false;
    const Failure& f = it->second;
    if (state.capacity > f.capacity) return false;
    if (state.offset != f.offset) return state.offset > f.offset;
    return f.rank < 0 || (state.ranks == f.ranks && state.rank >= f.rank);
  }
  void record(const StateKey& key, const Failure& state) {
    auto it = failed_.find(key);
    if (it == failed_.end()) {
      if (failed_.size() < kMaxMemoEntries) failed_.emplace(key, state);
      return;
    }
    // Keep the more general constraint; on a tie, the larger capacity.
    Failure& f = it->second;
    if (state.offset < f.offset || (state.offset == f.offset && state.capacity >= f.capacity)) f = state;
  }
  size_t size() const { return failed_.size(); }

 private:
  absl::flat_hash_map<StateKey, Failure> failed_;
};

class CapacitySearch {
 public:
  CapacitySearch(const SectionProblem& problem, int64_t capacity, const Deadline& deadline, FailureMemo& memo)
      : p_(problem), capacity_(capacity), deadline_(deadline), memo_(memo) {}

  // At most `discrepancies` non-first choices on any path (NOTE [ Limited
  // discrepancy dives ]); kNoDiscrepancyLimit: the complete search.
  Outcome solve(int32_t ranking, int64_t node_limit, int64_t discrepancies);
  // The complete search (up to the node limit) for plans whose canonical
  // order begins with `prefix` (item, offset), given in that order, each at
  // its min offset when placed (NOTE [ Band repair ]).
  Outcome solve_above(int32_t ranking, int64_t node_limit, absl::Span<const std::pair<int32_t, int64_t>> prefix);
  // Item offsets of the plan found by the last successful solve().
  const std::vector<int64_t>& solution() const { return solution_; }
  int64_t nodes() const { return nodes_; }
  int64_t deadlines() const { return deadlines_; }

 private:
  void reset(int32_t ranking, int64_t node_limit, int64_t discrepancies);
  // No section's bytes alone exceed the capacity.
  bool sections_fit() const;
  // The unplaced items as one partition of every section, and in
  // `cutpoints` the section boundaries none of them spans.
  Partition unplaced_items(std::vector<int32_t>& cutpoints) const;
  Outcome solve_partition(Partition& partition, int depth, const Candidate& last);
  Outcome search(const Partition& partition, const std::vector<Candidate>& previous, const Candidate& last,
                 int depth);
  Outcome try_candidate(const Partition& partition, const std::vector<Candidate>& ordering, const Candidate& c,
                        int depth, bool* hatless, int64_t* entered);
  Outcome split_and_solve(const Partition& partition, std::vector<int32_t>& cutpoints, int depth);
  void make_ordering(const std::vector<Candidate>& previous, std::vector<Candidate>& ordering);
  bool place(int32_t item, int64_t offset, bool* hatless);
  void unplace(size_t mark, int32_t item);
  void set_min_offset(int32_t item, int64_t value);
  bool section_fits(int32_t section, int64_t from);
  bool deadlines_fit();
  std::vector<int32_t> rank_items(const std::vector<int32_t>& items) const;
  StateKey state_key(const Partition& partition) const;
  std::vector<Candidate>& scratch(int depth);
  Outcome spend_node();

  // The hash terms of an item: unplaced with min offset `value`, or placed.
  static constexpr int64_t kPlacedTag = std::numeric_limits<int64_t>::min();
  static uint64_t term_a(int32_t item, int64_t value) { return mix(uint64_t(item) * 0x9e3779b97f4a7c15ull ^ uint64_t(value)); }
  static uint64_t term_b(int32_t item, int64_t value) {
    return mix(uint64_t(value) * 0xd6e8feb86659fd93ull + uint64_t(item) + 0x632be59bd9b4e019ull);
  }

  const SectionProblem& p_;
  const int64_t capacity_;
  const Deadline& deadline_;
  FailureMemo& memo_;
  int32_t ranking_ = 0;
  int64_t nodes_left_ = 0;
  int64_t nodes_ = 0;
  int64_t deadlines_ = 0;  // tops bounded (NOTE [ Deadlines ])
  int64_t discrepancies_ = kNoDiscrepancyLimit;  // left on the current path
  int64_t cut_ = 0;                              // children skipped for want of them

  std::vector<int64_t> offset_, min_offset_, solution_;  // per item
  std::vector<int64_t> total_;                           // per section: unplaced bytes
  std::vector<int32_t> cuts_;                            // per section boundary: unplaced items across
  struct Undo {
    int32_t item;
    bool deadline;  // false: min offset
    int64_t value;  // the previous one
  };
  std::vector<Undo> trail_;                              // for unplace
  std::vector<int64_t> max_top_;                         // per item: its top must stay at or below (its deadline)
  std::vector<int32_t> queue_;                           // sections to check again (deadlines moved)
  std::vector<std::pair<int32_t, int64_t>> bounded_;     // section_fits' scratch: (item, new deadline)
  std::vector<uint32_t> stamp_;                          // per section, dedups `affected_`
  uint32_t epoch_ = 0;
  std::vector<int32_t> affected_;                        // sections whose members' min offsets rose
  std::vector<int64_t> raised_;                          // per affected section: the highest new min offset
  std::vector<std::pair<int64_t, int64_t>> releases_;    // (release, size), section_fits' scratch
  struct Window {
    int64_t release, deadline, size;
  };
  std::vector<Window> windows_;                          // deadlines_fit's scratch
  struct Member {
    int32_t item;
    int64_t release, size;
  };
  std::vector<Member> stack_;                            // section_fits' scratch: the unplaced members
  std::vector<Candidate> moved_;
  std::deque<std::vector<Candidate>> scratch_;           // one ordering per recursion depth
  uint64_t hash_a_ = 0, hash_b_ = 0;                     // of the state, NOTE [ Failure memo ]
};

void CapacitySearch::reset(int32_t ranking, int64_t node_limit, int64_t discrepancies) {
  ranking_ = ranking;
  discrepancies_ = discrepancies;
  cut_ = 0;
  nodes_left_ = node_limit;
  const size_t n = p_.items.size(), sections = p_.totals.size();
  offset_.assign(n, kUnplaced);
  min_offset_.assign(n, 0);
  max_top_.assign(n, capacity_);
  solution_.assign(n, 0);
  total_ = p_.totals;
  cuts_ = p_.cuts;
  stamp_.assign(sections, 0);
  raised_.assign(sections, 0);
  trail_.clear();
  hash_a_ = hash_b_ = 0;
  for (int32_t i = 0; i < static_cast<int32_t>(n); ++i) {
    hash_a_ ^= term_a(i, 0);
    hash_b_ ^= term_b(i, 0);
  }
}

bool CapacitySearch::sections_fit() const {
  return std::none_of(total_.begin(), total_.end(), [&](int64_t total) { return total > capacity_; });
}

Partition CapacitySearch::unplaced_items(std::vector<int32_t>& cutpoints) const {
  const int32_t sections = static_cast<int32_t>(p_.totals.size());
  Partition partition{0, sections, {}};
  for (int32_t i = 0; i < static_cast<int32_t>(p_.items.size()); ++i) {
    if (offset_[i] == kUnplaced) partition.items.push_back(i);
  }
  cutpoints.clear();
  for (int32_t s = 0; s + 1 < sections; ++s) {
    if (cuts_[s] == 0) cutpoints.push_back(s + 1);
  }
  return partition;
}

Outcome CapacitySearch::solve(int32_t ranking, int64_t node_limit, int64_t discrepancies) {
  reset(ranking, node_limit, discrepancies);
  if (!sections_fit()) return Outcome::kInfeasible;
  // Split the problem where no buffer spans a section boundary.
  std::vector<int32_t> cutpoints;
  const Partition partition = unplaced_items(cutpoints);
  const Outcome outcome = split_and_solve(partition, cutpoints, 0);
  return outcome == Outcome::kInfeasible && cut_ > 0 ? Outcome::kOutOfNodes : outcome;
}

Outcome CapacitySearch::solve_above(int32_t ranking, int64_t node_limit,
                                    absl::Span<const std::pair<int32_t, int64_t>> prefix) {
  reset(ranking, node_limit, kNoDiscrepancyLimit);
  if (!sections_fit()) return Outcome::kInfeasible;
  int64_t from = 0;
  for (const auto& [item, offset] : prefix) {
    bool hatless = false;
    if (offset != min_offset_[item] || offset < from || offset + p_.items[item].size > max_top_[item] ||
        !place(item, offset, &hatless)) {
      return Outcome::kInfeasible;  // about this prefix only: nothing is recorded
    }
    solution_[item] = from = offset;
    for (int32_t s = p_.items[item].first; s + 1 < p_.items[item].last; ++s) --cuts_[s];
  }
  std::vector<int32_t> cutpoints;
  Partition partition = unplaced_items(cutpoints);
  if (partition.items.empty()) return Outcome::kFound;
  // Pieces split where no unplaced buffer spans a boundary start their
  // canonical order afresh (as in solve); otherwise the rest goes at or
  // above the prefix.
  if (!cutpoints.empty()) return split_and_solve(partition, cutpoints, 0);
  return solve_partition(partition, 0, Candidate{from, -1, -1});
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
    if (Outcome r = solve_partition(piece, depth + 1, Candidate{0, -1, -1}); r != Outcome::kFound) return r;
  }
  return Outcome::kFound;
}

// The items of a partition in the current ranking's order. The section
// totals are those left when the partition starts: MiniMalloc ranks each
// sub-problem afresh, and on the challenging problems that matters (fixed
// ranks from the whole problem's totals left E, H and I unsolved in 10 s).
std::vector<int32_t> CapacitySearch::rank_items(const std::vector<int32_t>& items) const {
  struct Key {
    uint64_t width;
    __int128 area;
    int64_t total, size;
    int32_t first, last, item;
  };
  std::vector<Key> keys;
  keys.reserve(items.size());
  for (int32_t item : items) {
    const SearchItem& it = p_.items[item];
    int64_t total = 0;
    for (int32_t s = it.first; s < it.last; ++s) total = std::max(total, total_[s]);
    keys.push_back({it.width, static_cast<__int128>(it.size) * it.width, total, it.size, it.first, it.last, item});
  }
  const absl::string_view ranking = kRankings[ranking_];
  std::stable_sort(keys.begin(), keys.end(), [&](const Key& a, const Key& b) {
    for (char c : ranking) {
      if (c == 'W' && a.width != b.width) return a.width > b.width;
      if (c == 'A' && a.area != b.area) return a.area > b.area;
      if (c == 'T' && a.total != b.total) return a.total > b.total;
      if (c == 'Z' && a.size != b.size) return a.size > b.size;
      if (c == 'S' && a.first != b.first) return a.first < b.first;
      if (c == 'R' && a.last != b.last) return a.last > b.last;
    }
    return false;
  });
  std::vector<int32_t> ranked;
  ranked.reserve(keys.size());
  for (const Key& k : keys) ranked.push_back(k.item);
  return ranked;
}

Outcome CapacitySearch::solve_partition(Partition& partition, int depth, const Candidate& last) {
  const std::vector<int32_t> ranked = rank_items(partition.items);
  std::vector<Candidate> candidates;
  candidates.reserve(ranked.size());
  partition.ranks = mix(uint64_t(ranking_) + 1);
  for (int32_t rank = 0; rank < static_cast<int32_t>(ranked.size()); ++rank) {
    candidates.push_back({min_offset_[ranked[rank]], rank, ranked[rank]});
    partition.ranks = mix(partition.ranks ^ (uint64_t(ranked[rank]) << 32 | uint32_t(rank)));
  }
  std::sort(candidates.begin(), candidates.end());
  return search(partition, candidates, last, depth);
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

StateKey CapacitySearch::state_key(const Partition& partition) const {
  const uint64_t where = mix(uint64_t(partition.first_section) << 32 | uint32_t(partition.last_section));
  return {hash_a_ ^ where, hash_b_ + where};
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
  const StateKey key = state_key(partition);
  const Failure state{capacity_, last.offset, last.rank, partition.ranks};
  if (memo_.covers(key, state)) return Outcome::kInfeasible;
  // NOTE [ Section inference at a node ]
  // Buffers placed from here on sit at or above the candidate's offset, and
  // those of one section are stacked, so a candidate at offset o is only
  // viable if o + (unplaced bytes of every section) <= capacity: one bound
  // for all candidates. Dominance bounds o by the lowest reachable top.
  int64_t max_total = 0, min_top = std::numeric_limits<int64_t>::max();
  for (int32_t s = partition.first_section; s < partition.last_section; ++s) max_total = std::max(max_total, total_[s]);
  int64_t latest = std::numeric_limits<int64_t>::max();  // every unplaced buffer starts at o or above
  for (const Candidate& c : ordering) {
    min_top = std::min(min_top, c.offset + p_.items[c.item].size);
    latest = std::min(latest, max_top_[c.item] - p_.items[c.item].size);
  }
  const int64_t highest = std::min({capacity_ - max_total, min_top - 1, latest});
  const int64_t cut_before = cut_;
  int64_t entered = 0;  // children searched
  for (const Candidate& c : ordering) {
    if (c.offset > highest) break;
    if (c < last) continue;  // not canonical
    bool hatless = false;
    const Outcome r = try_candidate(partition, ordering, c, depth, &hatless, &entered);
    if (r == Outcome::kCut) break;  // so would every later child be
    if (r != Outcome::kInfeasible) return r;
    if (hatless) break;
  }
  if (cut_ == cut_before) memo_.record(key, state);
  return Outcome::kInfeasible;
}

// Places `c` and searches below it; *entered counts the children of the node
// searched so far, all but the first at the cost of a discrepancy.
Outcome CapacitySearch::try_candidate(const Partition& partition, const std::vector<Candidate>& ordering,
                                      const Candidate& c, int depth, bool* hatless, int64_t* entered) {
  if (const Outcome spent = spend_node(); spent != Outcome::kFound) return spent;
  const size_t mark = trail_.size();
  Outcome result = Outcome::kInfeasible;
  if (place(c.item, c.offset, hatless)) {
    const int64_t cost = (*entered)++ > 0 ? 1 : 0;
    if (cost > discrepancies_) {
      ++cut_;
      unplace(mark, c.item);
      return Outcome::kCut;
    }
    discrepancies_ -= cost;
    solution_[c.item] = c.offset;  // a leaf of a later split piece records only its own items
    const SearchItem& it = p_.items[c.item];
    std::vector<int32_t> cutpoints;
    for (int32_t s = it.first; s + 1 < it.last; ++s) {
      if (--cuts_[s] == 0) cutpoints.push_back(s + 1);
    }
    result = cutpoints.empty() ? search(partition, ordering, c, depth + 1)
                               : split_and_solve(partition, cutpoints, depth);
    for (int32_t s = it.first; s + 1 < it.last; ++s) ++cuts_[s];
    discrepancies_ += cost;
  }
  unplace(mark, c.item);
  return result;
}

void CapacitySearch::set_min_offset(int32_t item, int64_t value) {
  hash_a_ ^= term_a(item, min_offset_[item]) ^ term_a(item, value);
  hash_b_ ^= term_b(item, min_offset_[item]) ^ term_b(item, value);
  min_offset_[item] = value;
}

// NOTE [ Hatless placements ]
// Candidate h at its min offset m, top t, raises nobody when every unplaced
// buffer b overlapping it already has min offset >= t (MiniMalloc's rule asks
// that there be no such b; this is the general case, same argument). While h
// is unplaced, dominance keeps every candidate at or above t out, so no b is
// placed before h and h is never raised: in every completion the search can
// reach, h ends at m, and placing it changes no other min offset. A
// completion that places a later candidate c first and h afterwards (h comes
// back in a split piece, whose canonical order starts afresh) is therefore
// the same plan as h first, then c and the rest, which the search under h
// explored (its section checks and dominance only weaken with h placed). So
// if h's subtree fails, so does every later candidate's. On the challenging
// files at 2^20 this halves C's nodes (144,337 -> 74,730) and quarters E's
// (238,050 -> 59,416); brute force agrees (tests/planner/search_test.cpp).
//
// Places `item` at `offset` and raises the min offsets of the unplaced
// buffers it overlaps; *hatless tells whether it raised none. False if a
// section whose buffers had to move up can no longer hold its unplaced
// bytes under the capacity (undo with unplace).
bool CapacitySearch::place(int32_t item, int64_t offset, bool* hatless) {
  const SearchItem& it = p_.items[item];
  const int64_t top = offset + it.size;
  offset_[item] = offset;
  hash_a_ ^= term_a(item, min_offset_[item]) ^ term_a(item, kPlacedTag);
  hash_b_ ^= term_b(item, min_offset_[item]) ^ term_b(item, kPlacedTag);
  for (int32_t s = it.first; s < it.last; ++s) total_[s] -= it.size;
  ++epoch_;
  affected_.clear();
  *hatless = true;
  for (int32_t other : p_.overlaps[item]) {
    if (offset_[other] != kUnplaced) continue;
    const int64_t raised = align_up(top, p_.items[other].alignment);
    if (min_offset_[other] >= raised) continue;
    *hatless = false;
    if (raised + p_.items[other].size > max_top_[other]) return false;
    trail_.push_back({other, false, min_offset_[other]});
    set_min_offset(other, raised);
    for (int32_t s = p_.items[other].first; s < p_.items[other].last; ++s) {
      if (stamp_[s] != epoch_) {
        stamp_[s] = epoch_;
        affected_.push_back(s);
        raised_[s] = raised;
      }
      raised_[s] = std::max(raised_[s], raised);
    }
  }
  // A release at or below capacity - total cannot break the stacking bound
  // (the node's offset is below it too, NOTE [ Section inference at a node ]),
  // so only sections where a buffer rose above it are checked in full.
  // A check may bound members' tops and queue their other sections
  // (NOTE [ Deadlines ]); stamps now dedup the queue.
  ++epoch_;
  queue_.clear();
  for (int32_t s : affected_) {
    if (raised_[s] + total_[s] > capacity_) {
      stamp_[s] = epoch_;
      queue_.push_back(s);
    }
  }
  for (size_t k = 0; k < queue_.size(); ++k) {
    if (k >= kMaxChecksPerPlacement) break;
    if (!section_fits(queue_[k], offset)) return false;
  }
  return true;
}

// Can the unplaced buffers of `section` be stacked below the capacity, each
// at or above max(its min offset, `from`)? For every release time h, the
// buffers released at h or later need h + their bytes <= capacity (the
// makespan bound of one machine with release times; exact for a stack).
//
// A release h <= capacity - total passes (h + bytes released at or after h
// <= h + total), so one pass over the members keeps only the buffers
// released above it, and only those are sorted: the bytes released at or
// after such an h are all theirs. (Sorting every member's release made this
// check 30-45 % of the search's time on the challenging problems.)
bool CapacitySearch::section_fits(int32_t section, int64_t from) {
  const int64_t passes = capacity_ - total_[section];
  int64_t lowest = std::numeric_limits<int64_t>::max();
  bool bounded = false;
  stack_.clear();
  for (int32_t item : p_.members[section]) {
    if (offset_[item] != kUnplaced) continue;
    const int64_t release = std::max(min_offset_[item], from);
    stack_.push_back({item, release, p_.items[item].size});
    lowest = std::min(lowest, release);
    bounded |= max_top_[item] < capacity_;
  }
  if (stack_.empty()) return true;       // nothing left to place
  if (lowest > passes) return false;     // lowest + total > capacity
  if (bounded && !deadlines_fit()) return false;
  releases_.clear();
  for (const Member& m : stack_) {
    if (m.release > passes) releases_.emplace_back(m.release, m.size);
  }
  if (releases_.empty()) return true;
  std::sort(releases_.begin(), releases_.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  int64_t bytes = 0, min_slack = std::numeric_limits<int64_t>::max();
  for (auto& [release, size] : releases_) {
    bytes += size;
    if (release + bytes > capacity_) return false;
    size = capacity_ - release - bytes;  // from here on: the slack above `release`
    min_slack = std::min(min_slack, size);
  }
  // NOTE [ Deadlines ]
  // The buffers released at h or later fill all but slack(h) = capacity - h -
  // bytes(h) of [h, capacity). A buffer b released below h covers
  // top - max(h, offset) of that range, so if its size exceeds slack(h) it
  // must start below h and end at or below h + slack(h): a deadline, kept
  // per buffer (max_top_, undone with the placement that caused it) apart
  // from the min offsets, which the failure memo keys on. It holds in every
  // section b is live in, and all of them stack it: those sections with
  // another bounded member are checked again, for every window [h1, h2)
  // (deadlines_fit), and a placement that raises b above d - size(b) fails
  // at once. Each bound follows from the placed buffers and the min offsets
  // alone (not the node's offset: below), so it cuts no completion and the
  // memo, hatless pruning and proofs stay sound (brute force:
  // DeadlinesKeepEveryAnswer in tests/planner/search_test.cpp). Where a
  // section is tight at its top (a long buffer raised there) this tells the
  // far sections of that buffer how low it must stay. On
  // minimalloc_like_problem 1-100 at 2^20, 1 s: 51 -> 54 fit, and the 50
  // both fit take 0.76x the CPU time; the shared challenging files within
  // 0.6-1.6x, all fit (bench/RESULTS.md, issue 20 seventh pass). Members
  // stacking above a bounded b (released above its latest start) were also
  // given b's release + size(b): 49 fit, slower; not kept.
  //
  // A bound does not depend on the node's offset `from`, though releases
  // do: the check has failed unless from <= capacity - total (`lowest >
  // passes` above), so every release above that, the only ones that bound
  // a member, is that buffer's own min offset, and h > max(min offset,
  // from) is h > min offset. A deadline thus holds wherever the unplaced
  // buffers stay at or above their min offsets: in the pieces of a split
  // too, whose canonical order starts again at 0, below `from` (a piece's
  // failure, recorded under (0, -1), was proved with bounds that hold
  // there), and on every path to the same state. What does read `from`
  // (the stacking bound, deadlines_fit's windows, release + size >
  // deadline) only refuses the placement being made, through which the
  // plans the node must cover (in canonical order) all lie at or above
  // `from`, and leaves nothing behind. (Brute force and the search with
  // the memo or the deadlines off agree with it on 15,000 random problems,
  // 12,000 built to split: bench/RESULTS.md, issue 20 seventeenth pass.)
  bounded_.clear();
  for (const Member& m : stack_) {
    if (m.size <= min_slack || m.release >= releases_.front().first) continue;  // no h bounds it
    int64_t deadline = max_top_[m.item];
    for (const auto& [h, slack] : releases_) {
      if (h <= m.release) break;  // sorted by release, highest first
      if (m.size > slack) deadline = std::min(deadline, h + slack);
    }
    if (deadline < max_top_[m.item]) bounded_.emplace_back(m.item, deadline);
  }
  for (const auto& [item, deadline] : bounded_) {
    const SearchItem& it = p_.items[item];
    if (std::max(min_offset_[item], from) + it.size > deadline) return false;
    trail_.push_back({item, true, max_top_[item]});
    max_top_[item] = deadline;
    ++deadlines_;
    // Another section learns something only from windows with two bounded
    // members: its releases, hence its own deadlines, have not moved.
    for (int32_t s = it.first; s < it.last; ++s) {
      if (s == section || stamp_[s] == epoch_) continue;
      bool other = false;
      for (int32_t m : p_.members[s]) {
        if (m != item && offset_[m] == kUnplaced && max_top_[m] < capacity_) {
          other = true;
          break;
        }
      }
      if (!other) continue;
      stamp_[s] = epoch_;
      queue_.push_back(s);
    }
  }
  return true;
}

// What deadlines imply for one section's stack (stack_): for every window
// [h1, h2) (h1 a release, h2 a deadline), the members released at h1 or
// later that must end by h2 need at most h2 - h1 bytes (the condition for a
// preemptive stack, hence for any).
bool CapacitySearch::deadlines_fit() {
  windows_.clear();
  for (const Member& m : stack_) {
    if (max_top_[m.item] < capacity_) windows_.push_back({m.release, max_top_[m.item], m.size});
  }
  std::sort(windows_.begin(), windows_.end(), [](const Window& a, const Window& b) { return a.release > b.release; });
  for (const Window& w2 : windows_) {
    // h2 = w2's deadline; h1 = each release, highest first. A partial sum at
    // tied releases counts a subset of those released at h1 or later: still
    // a valid (weaker) check, and the last of the ties counts them all.
    int64_t bytes = 0;
    for (const Window& w : windows_) {
      if (w.deadline > w2.deadline) continue;
      bytes += w.size;
      if (bytes > w2.deadline - w.release) return false;
    }
  }
  return true;
}

void CapacitySearch::unplace(size_t mark, int32_t item) {
  while (trail_.size() > mark) {
    const Undo& u = trail_.back();
    if (u.deadline) {
      max_top_[u.item] = u.value;
    } else {
      set_min_offset(u.item, u.value);
    }
    trail_.pop_back();
  }
  const SearchItem& it = p_.items[item];
  for (int32_t s = it.first; s < it.last; ++s) total_[s] += it.size;
  offset_[item] = kUnplaced;
  hash_a_ ^= term_a(item, kPlacedTag) ^ term_a(item, min_offset_[item]);
  hash_b_ ^= term_b(item, kPlacedTag) ^ term_b(item, min_offset_[item]);
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
// with the round's node limit (MiniMalloc's round robin), in dives first.
// Then it bisects between the floor and the best peak found, with complete
// searches only and a quarter of the limit, but never less than two dives'
// worth (a dive takes two nodes per buffer: with 2n nodes split four ways
// no early probe could finish, and with the floor probe's dives taking most
// of the first rounds the minimiser stayed at the first plan on some
// minimalloc_like_problem seeds, 1.47x the bound). A probe that runs out of nodes
// proves nothing and counts as infeasible for the rest of the round. The node
// limit doubles every round until the floor is reached or the deadline
// passes; the failure memo keeps what every probe proved, so a round resumes
// the last one's work rather than repeating it. Capacities are multiples of
// the grain, as canonical peaks are. With a target capacity the driver asks
// about that one; from the fourth round on, a round that leaves it undecided
// also bisects between the target and the best plan and repairs bands of
// that plan (NOTE [ Band repair ]), as a minimising round does from the first.
//
// NOTE [ Band repair ]
// The search fails on minimalloc_like_problem by building wrong bottom
// levels early and never revisiting them: given the generator's own plan
// below a quarter of the capacity as a fixed prefix, it fits 25 of the 46
// seeds it misses in 1 s (bench/RESULTS.md, issue 20 eighth pass). Band
// repair is a large-neighbourhood search built on the search: mirror the
// best plan (offset' = peak - offset - size, again a valid plan, whose
// bottom is the old top), settle it (each buffer down to the lowest
// aligned offset where it fits, until none moves), fix the buffers below a
// fraction of its peak as a prefix of the canonical order (placed through
// place(), so every check sees them) and search the rest with a small node
// limit: at the goal (the target, or the floor), halfway to it, one grain
// below the plan's peak, and at its peak. A plan no higher is kept (equal
// ones let the plans drift), and the next step mirrors again, so the band
// fixed now is searched again then. Steps alternate mirrored and not, cycle
// the fraction through 25/40/50/60/75 % and change ranking every ten.
// - Settling makes the plan canonical and leaves no buffer that could drop
//   into a gap below it; such a plan passes the dominance rule at every
//   node (a buffer that could rest lower would have a free slot there), so
//   its own completion stays in the search space and a step at its peak has
//   a plan to find. (A plan only pushed down onto the buffers below was
//   refused at its own peak after one node on most steps.)
// - It proves nothing: a refused prefix or a failed step says nothing about
//   the problem, its failures go to a memo of its own (repair_memo_), the
//   floor moves only by the probes, and every plan it keeps comes from a
//   search or from settling (which moves buffers only into free space), so
//   it is valid (brute force: BandRepairKeepsEveryAnswer in
//   tests/planner/search_test.cpp).
// - Budget: a round's repair gets as many nodes as the round's probes spent
//   (counting a prefix placement and each buffer settled as a node), in
//   steps of 4n nodes; it is deterministic in nodes like the rest.
// Measured (bench/RESULTS.md, issue 20 eleventh pass): on
// minimalloc_like_problem 1-100 in 1 s, minimising proves 46 optimal (was 44)
// and the mean peak / lower bound goes 1.0325 -> 1.0267 (lower on 48 seeds,
// higher on 6); at 2^20 55 fit (was 54, none lost). D and J minimised in
// 10 s: 1,030,144 -> 1,020,928 and 1,034,240 -> 1,022,976, below any plan
// found before (not proven). At 2^20 F and H fit 2-3x sooner, E 1.5x later;
// easy proofs take 1.5x (the repair runs between their rounds). Starting
// at the first round with a target made A-E 2-4x slower there.
class CapacityDriver {
 public:
  CapacityDriver(const SectionProblem& problem, absl::Span<const Buffer> buffers, int64_t bound, Plan start,
                 const Deadline& deadline, int64_t target, int64_t first_node_limit)
      : problem_(problem),
        buffers_(buffers),
        best_(std::move(start)),
        deadline_(deadline),
        target_(target),
        first_node_limit_(first_node_limit) {
    floor_ = round_up(bound);
  }

  ExactResult run() {
    if (target_ > 0) {
      decide_target();
    } else {
      minimise();
    }
    best_.peak_floor = std::min(floor_, best_.peak);
    return {std::move(best_), nodes_, deadlines_, repair_steps_, repaired_};
  }

 private:
  int64_t grain() const { return problem_.grain; }
  int64_t round_up(int64_t bytes) const { return (bytes + grain() - 1) / grain() * grain(); }
  int64_t first_limit() const {
    return first_node_limit_ > 0 ? first_node_limit_ : std::max<int64_t>(2 * problem_.items.size(), 64);
  }

  void decide_target() {
    for (int64_t limit = first_limit(); best_.peak > target_ && floor_ <= target_; limit *= 2) {
      const int64_t before = nodes_;
      if (probe(target_, limit) == Outcome::kOutOfTime) return;
      if (best_.peak <= target_ || floor_ > target_ || limit < kFirstRepairRound * first_limit()) continue;
      if (!descend(target_ + grain(), limit)) return;
      if (best_.peak > target_ && floor_ <= target_) repair(target_, nodes_ - before);   // no repair after a proof
    }
  }

  void minimise() {
    for (int64_t limit = first_limit(); best_.peak > floor_; limit *= 2) {
      const int64_t before = nodes_;
      const Outcome at_floor = probe(floor_, limit);
      if (at_floor == Outcome::kOutOfTime) return;
      if (at_floor == Outcome::kInfeasible) {
        limit /= 2;  // the floor rose: ask there with the same limit
        continue;
      }
      if (!descend(floor_, limit)) return;
      if (best_.peak > floor_) repair(floor_, nodes_ - before);
    }
  }

  // Bisects between `lo` and the best peak with complete searches, then
  // steps down from the best plan while that is easy. False when out of time.
  bool descend(int64_t lo, int64_t limit) {
    const int64_t stop = std::max(floor_, lo);
    int64_t hi = best_.peak - grain();
    for (int probes = 0; probes < kProbesPerRound && lo <= hi; ++probes) {
      const int64_t mid = lo + (hi - lo) / grain() / 2 * grain();
      const Outcome outcome = probe(mid, bisection_limit(limit), /*dives=*/false);
      if (outcome == Outcome::kOutOfTime) return false;
      if (outcome == Outcome::kFound) hi = best_.peak - grain();
      if (outcome != Outcome::kFound) lo = mid + grain();
    }
    for (Outcome step = Outcome::kFound; step == Outcome::kFound && best_.peak > stop;) {
      step = probe(best_.peak - grain(), bisection_limit(limit), /*dives=*/false);
      if (step == Outcome::kOutOfTime) return false;
    }
    return true;
  }

  int64_t bisection_limit(int64_t limit) const { return std::max(limit / kBisectionShare, 2 * first_limit()); }

  static constexpr int kProbesPerRound = 3;
  static constexpr int64_t kBisectionShare = 4;  // a bisection probe gets 1/4 of the round's limit, or more
  static constexpr int64_t kFirstRepairRound = 8;  // with a target: from the round with 8x the first limit
  static constexpr int64_t kRepairStepItems = 4;   // a repair step's node limit, per buffer
  static constexpr std::array<int64_t, 5> kBandPercents = {25, 40, 50, 60, 75};
  static constexpr int64_t kStepsPerRanking = 10;

  // Asks for a plan within `capacity` under each ranking in turn, in dives
  // first if `dives` (NOTE [ Limited discrepancy dives ]), each search with
  // the node limit; keeps a plan found, raises the floor if none can exist.
  Outcome probe(int64_t capacity, int64_t node_limit, bool dives = true) {
    if (deadline_.expired()) return Outcome::kOutOfTime;
    CapacitySearch search(problem_, capacity, deadline_, memo_);
    Outcome outcome = Outcome::kOutOfNodes;
    for (int64_t d = dives ? 0 : kDiveDiscrepancies; d <= kDiveDiscrepancies && outcome == Outcome::kOutOfNodes; ++d) {
      const int64_t discrepancies = d < kDiveDiscrepancies ? d : kNoDiscrepancyLimit;
      for (int32_t ranking = 0; ranking < static_cast<int32_t>(kRankings.size()); ++ranking) {
        outcome = search.solve(ranking, node_limit, discrepancies);
        if (outcome != Outcome::kOutOfNodes) break;
      }
    }
    nodes_ += search.nodes();
    deadlines_ += search.deadlines();
    if (outcome == Outcome::kFound) {
      best_ = to_plan(problem_, buffers_, search.solution());
      repaired_ = false;
    }
    // A target need not be a multiple of the grain: the next canonical peak
    // above it is round_up(capacity + 1), not capacity + grain.
    if (outcome == Outcome::kInfeasible) floor_ = std::max(floor_, round_up(capacity + 1));
    return outcome;
  }

  // Band repair steps (NOTE [ Band repair ]) on the best plan until `budget`
  // nodes are spent, the plan reaches `goal` or the deadline passes.
  void repair(int64_t goal, int64_t budget) {
    const int64_t step_limit = kRepairStepItems * static_cast<int64_t>(problem_.items.size());
    for (int64_t spent = 0; spent < budget && best_.peak > goal && !deadline_.expired(); ++step_) {
      const std::vector<std::pair<int32_t, int64_t>> plan = settled(/*mirror=*/step_ % 2 == 0);
      spent += static_cast<int64_t>(plan.size());
      int64_t peak = 0;
      for (const auto& [item, offset] : plan) peak = std::max(peak, offset + problem_.items[item].size);
      if (peak < best_.peak) {  // settling alone lowered it
        std::vector<int64_t> offsets(problem_.items.size());
        for (const auto& [item, offset] : plan) offsets[item] = offset;
        keep(to_plan(problem_, buffers_, offsets));
        continue;
      }
      // In 128 bits: peaks reach 2^62 (check_total in plan.cpp), past 2^63 / 75.
      const int64_t band =
          static_cast<int64_t>(static_cast<__int128>(peak) * kBandPercents[(step_ / 2) % kBandPercents.size()] / 100);
      size_t fixed = 0;
      while (fixed < plan.size() && plan[fixed].second < band) ++fixed;
      const absl::Span<const std::pair<int32_t, int64_t>> prefix(plan.data(), fixed);
      const int32_t ranking = static_cast<int32_t>(step_ / kStepsPerRanking % kRankings.size());
      const int64_t halfway = round_up(goal + (peak - goal) / 2);
      std::vector<int64_t> capacities = {goal};
      if (halfway > goal && halfway < peak - grain()) capacities.push_back(halfway);
      if (peak - grain() > goal) capacities.push_back(peak - grain());
      capacities.push_back(peak);
      for (int64_t capacity : capacities) {
        CapacitySearch search(problem_, capacity, deadline_, repair_memo_);
        const Outcome outcome = search.solve_above(ranking, step_limit, prefix);
        spent += search.nodes() + static_cast<int64_t>(fixed);  // a prefix placement costs about a node
        nodes_ += search.nodes();
        ++repair_steps_;
        if (outcome == Outcome::kOutOfTime) return;
        if (outcome == Outcome::kFound) {
          keep(to_plan(problem_, buffers_, search.solution()));
          break;
        }
      }
    }
  }

  void keep(Plan plan) {
    if (plan.peak > best_.peak) return;
    best_ = std::move(plan);
    repaired_ = true;
  }

  // The best plan's item offsets, mirrored (peak - offset - size) if
  // `mirror`, then settled: each buffer on the aligned top of the highest
  // buffer below it (a mirrored offset need not be aligned, so a buffer may
  // rise by less than its alignment; keep() refuses a higher plan), then, in
  // order of offset, down to the lowest aligned offset where it fits beside
  // the others, until none moves (the deadline is checked between passes: a
  // pass cut short would leave the highest buffers, which set the peak,
  // where they were). Returns (item, offset) in order of offset.
  std::vector<std::pair<int32_t, int64_t>> settled(bool mirror) const {
    const size_t n = problem_.items.size();
    std::vector<std::pair<int32_t, int64_t>> order(n);
    for (size_t i = 0; i < n; ++i) {
      const SearchItem& it = problem_.items[i];
      const int64_t offset = best_.offsets[it.buffer];
      order[i] = {static_cast<int32_t>(i), mirror ? best_.peak - offset - it.size : offset};
    }
    const auto by_offset = [](const auto& a, const auto& b) { return a.second < b.second; };
    std::sort(order.begin(), order.end(), by_offset);
    std::vector<int64_t> at(n, -1);
    for (const auto& [item, unused] : order) {
      int64_t top = 0;
      for (int32_t other : problem_.overlaps[item]) {
        if (at[other] >= 0) top = std::max(top, at[other] + problem_.items[other].size);
      }
      at[item] = align_up(top, problem_.items[item].alignment);
    }
    const auto sort_at = [&] {   // order = (item, at[item]) by offset
      for (size_t i = 0; i < n; ++i) order[i] = {static_cast<int32_t>(i), at[i]};
      std::sort(order.begin(), order.end(), by_offset);
    };
    std::vector<std::pair<int64_t, int64_t>> taken;  // [begin, end) of the buffers beside one
    for (bool moved = true; moved && !deadline_.expired();) {  // every pass leaves a valid plan
      moved = false;
      sort_at();
      for (const auto& [item, unused] : order) {
        const SearchItem& it = problem_.items[item];
        taken.clear();
        for (int32_t other : problem_.overlaps[item]) taken.emplace_back(at[other], at[other] + problem_.items[other].size);
        std::sort(taken.begin(), taken.end());
        int64_t lowest = 0;
        for (const auto& [begin, end] : taken) {
          if (lowest + it.size <= begin) break;
          lowest = std::max(lowest, align_up(end, it.alignment));
        }
        if (lowest < at[item]) {
          at[item] = lowest;
          moved = true;
        }
      }
    }
    sort_at();
    return order;
  }

  const SectionProblem& problem_;
  absl::Span<const Buffer> buffers_;
  Plan best_;
  const Deadline& deadline_;
  const int64_t target_;            // 0: minimise
  const int64_t first_node_limit_;  // 0: first_limit()'s default
  int64_t floor_;                   // no plan has a smaller peak
  int64_t nodes_ = 0;
  int64_t deadlines_ = 0;
  FailureMemo memo_;
  FailureMemo repair_memo_;  // apart from memo_: band repair proves nothing
  int64_t step_ = 0;         // band repair steps so far
  int64_t repair_steps_ = 0;  // its searches
  bool repaired_ = false;     // best_ came from band repair
};

}  // namespace

ExactResult plan_exact(absl::Span<const Buffer> buffers, int64_t bound, Plan start, const Deadline& deadline,
                       int64_t capacity, int64_t first_node_limit) {
  start.peak_floor = bound;
  if (buffers.size() > kMaxExactItems || deadline.expired()) return {std::move(start), 0};
  // At most kMaxPairs overlaps and memberships: tens of milliseconds.
  const std::optional<SectionProblem> problem = make_section_problem(buffers, kMaxPairs);
  if (!problem) return {std::move(start), 0};
  return CapacityDriver(*problem, buffers, bound, std::move(start), deadline, capacity, first_node_limit).run();
}

}  // namespace encore::planner::internal
