// GraphedStep (include/encore/graphed.h): per-signature graphs over one
// shared arena, every call one training step.
#include "encore/graphed.h"

#include <algorithm>
#include <cstdio>
#include <optional>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "capture/graph_impl.h"
#include "capture/steps.h"
#include "encore/error.h"
#include "src/core/tensor_internal.h"

namespace encore {

namespace {

std::vector<Tensor> detached(std::vector<Tensor> outs) {
  for (Tensor& t : outs) {
    if (t.defined()) t = t.detach();
  }
  return outs;
}

// A fresh handle on `like`'s elements in `storage` (same offset, shape,
// strides and dtype).
Tensor view_on(const Ref<Storage>& storage, const Tensor& like) {
  return capture_internal::view_at(storage, like.storage_offset(), like);
}

int64_t bytes_of(const std::vector<Tensor>& ts) {
  int64_t n = 0;
  for (const Tensor& t : ts) n += t.storage()->nbytes();
  return n;
}

}  // namespace

struct GraphPool::Impl {
  Ref<Storage> arena;             // shared by every graph of every member (one device: the last grown for)
  uint64_t generation = 0;        // bumped with every new arena
  absl::flat_hash_map<const void*, int64_t> needs;   // each member's largest held graph's arena need
  int64_t largest_need_except(const void* member) const {
    int64_t n = 0;
    for (const auto& [m, need] : needs) {
      if (m != member) n = std::max(n, need);
    }
    return n;
  }
};

GraphPool::GraphPool() : impl_(std::make_shared<Impl>()) {}
int64_t GraphPool::arena_bytes() const { return impl_->arena ? impl_->arena->nbytes() : 0; }

struct GraphedStep::Impl {
  // One signature's state, from its first call on.
  struct Entry {
    std::string signature;
    int calls = 0;                                    // calls since the entry (re)started
    std::vector<Tensor> static_inputs;                // made at the recorded call; the step reads these
    std::unique_ptr<Graph::Impl> recorded;            // after the recorded call, until its capture
    std::optional<Graph> graph;                       // after the capture
    uint64_t arena_generation = 0;                    // the pool's arena its graph was captured into
    bool eager_only = false;                          // its capture was refused: every call runs eagerly
    int refused_recordings = 0;                       // NOTE [ A refused recording is tried again ]
    int leaf_restarts = 0;                            // NOTE [ Graphs of another gradient state ]
    std::vector<size_t> written;                      // static inputs the step writes in place
    // NOTE [ Inputs that are the step's own state ]: the persistent storages
    // the step's recorded call touched other than through its inputs (by
    // Storage::id()), and whether a call with a non-contiguous input has
    // already probed them.
    absl::flat_hash_set<uint64_t> touched;
    bool probed = false;
    int64_t last_used = 0;
    int64_t replays = 0;
    // NOTE [ Outputs the caller keeps ]: what the last replay handed out
    // (fresh handles on the graph's output region), and the region's
    // reference count just after, to tell at the next replay whether the
    // caller still holds them or views of them.
    std::vector<Tensor> returned;
    int32_t region_refs = 0;
    int64_t held_bytes() const {
      return bytes_of(static_inputs) + (graph ? graph->internals().stats.output_bytes : 0);
    }
    int64_t arena_need() const {
      return graph ? graph->internals().stats.arena_bytes : recorded ? recorded->stats.arena_bytes : 0;
    }
  };

  Fn fn;
  GraphedOptions options;
  GraphedStats stats;
  std::string last_fallback;
  absl::flat_hash_set<std::string> logged;
  absl::flat_hash_map<std::string, std::unique_ptr<Entry>> entries;
  std::shared_ptr<GraphPool::Impl> pool;   // options.pool's (set once the options are checked)
  int64_t clock = 0;

  ~Impl() {
    if (pool) pool->needs.erase(this);
  }

  CaptureOptions capture_options() const {
    CaptureOptions o = options.capture;
    o.warmup = options.warmup;
    o.inputs.clear();
    return o;
  }

  void fallback(const std::string& signature, const std::string& why) {
    ++stats.eager_fallbacks;
    last_fallback = absl::StrCat("graphed step [", signature, "]: ", why);
    if (options.log && logged.insert(why.substr(0, why.find(':'))).second) {
      std::fprintf(stderr, "encore: %s (runs eagerly; logged once)\n", last_fallback.c_str());
    }
  }

  std::vector<Tensor> eager(const std::vector<Tensor>& inputs) { return detached(fn(inputs)); }

  // A signature whose capture was refused: every later call runs eagerly, so
  // it keeps no graph, recording or static inputs (which would count against
  // max_bytes).
  void make_eager_only(Entry& e, const std::string& why) {
    e.eager_only = true;
    e.recorded.reset();
    e.graph.reset();
    e.returned.clear();
    e.static_inputs.clear();
    fallback(e.signature, why);
  }

  // NOTE [ Inputs that are the step's own state ]: a step may also reach an
  // input's memory itself (a module's buffer passed as an input, a tensor
  // the step function holds). Eagerly, a write through either is seen
  // through the other; a graph's static input is a copy, and the two would
  // come apart without a word (the output of a step that bumps the buffer
  // through its input and reads it as state was the stale value). So:
  //  - The recorded call gives the step, for each contiguous input, a
  //    second storage over the caller's own bytes (borrow_storage): the
  //    call is exact, and every launch that touches the caller's storage
  //    itself is the step reaching it as state. After the call those
  //    static inputs get memory of their own.
  //  - A non-contiguous input cannot be such a storage (the static input is
  //    a contiguous copy, and the recording's kernels would not fit it):
  //    the recorded call runs on a borrowed storage over the caller's whole
  //    storage, in its layout, as an exact probe whose recording is
  //    dropped; the next call records again, with a copy.
  //  - An input the recorded call reached as state makes the signature
  //    eager (a refused capture); a later call whose input is a storage the
  //    recording touched as state runs eagerly (the fallback names it).
  // Storages, not bytes, are compared (a launch lists whole storages): an
  // input carved from the same block as the state runs eagerly too.
  std::string aliased_input(const Entry& e, const std::vector<Tensor>& inputs) const {
    for (size_t i = 0; i < inputs.size(); ++i) {
      if (!e.touched.contains(inputs[i].storage()->id())) continue;
      return absl::StrFormat("input %d is memory the step also reads or writes itself (a module buffer or a "
                             "tensor the step holds, passed as an input): a graph's static input would be a "
                             "copy of it, which the step's own reads and writes would not see",
                             i);
    }
    return "";
  }

  // The static input the recorded call gives the step for `t`: over the
  // caller's bytes where it is contiguous (`borrowed`), else over its whole
  // storage in its layout (`probe`), or a contiguous copy once probed.
  static Tensor recorded_input(const Tensor& t, bool probed, bool& borrowed, bool& probe) {
    borrowed = t.is_contiguous();
    probe = !borrowed && !probed;
    if (borrowed) {
      return capture_internal::view_at(
          borrow_storage(t.data_ptr(), t.numel() * static_cast<int64_t>(dtype_size(t.dtype())), t.device()), 0, t);
    }
    if (probe) {
      const Storage& s = *t.storage();
      return capture_internal::view_at(borrow_storage(s.data(), s.nbytes(), s.device()), t.storage_offset(), t);
    }
    return t.detach().clone();
  }

  // The persistent storages the recorded step touched other than its static inputs.
  static absl::flat_hash_set<uint64_t> touched_itself(const Graph::Impl& g, const std::vector<Tensor>& static_inputs) {
    absl::flat_hash_set<uint64_t> ids;
    for (const capture_internal::KernelRecord& k : g.trace.kernels) {
      for (size_t j = 0; j < k.storage_ids.size(); ++j) {
        const int32_t id = j < k.reads.size() ? k.reads[j] : k.writes[j - k.reads.size()];
        if (id == capture_internal::kPersistent) ids.insert(k.storage_ids[j]);
      }
    }
    for (const Tensor& t : static_inputs) ids.erase(t.storage()->id());
    return ids;
  }

  // NOTE [ Inputs written in place ]: the step reads its static inputs, so
  // what it writes into them (a carried state, an in-place normalisation)
  // goes back into the caller's tensors after each recorded call and replay,
  // as an eager call would have left them.
  void copy_back(const Entry& e, const std::vector<Tensor>& inputs) {
    for (size_t i : e.written) {
      Tensor dst = inputs[i];
      dst.copy_(e.static_inputs[i]);
    }
  }

  std::function<std::vector<Tensor>()> step_of(Entry& e) {
    return [this, &e] { return fn(e.static_inputs); };
  }

  void refresh_stats() {
    stats.graphs = 0;
    stats.output_bytes = stats.input_bytes = stats.largest_arena_bytes = stats.eager_peak_bytes = 0;
    int64_t held_need = 0;
    for (const auto& [sig, e] : entries) {
      if (e->graph) {
        ++stats.graphs;
        const CaptureStats& c = e->graph->internals().stats;
        stats.output_bytes += c.output_bytes;
        stats.eager_peak_bytes = std::max(stats.eager_peak_bytes, c.eager_peak_bytes);
        held_need = std::max(held_need, c.arena_bytes);
      }
      stats.input_bytes += bytes_of(e->static_inputs);
      stats.largest_arena_bytes = std::max(stats.largest_arena_bytes, e->arena_need());
    }
    pool->needs[this] = held_need;
    stats.arena_bytes = pool->arena ? pool->arena->nbytes() : 0;
  }

  // Forgets e's graph: its signature starts over at its next call. Counted
  // in stats.released when it makes room for another graph.
  void release(Entry& e, bool for_room) {
    e.graph.reset();
    e.returned.clear();
    e.recorded.reset();
    e.static_inputs.clear();
    e.calls = 0;
    e.replays = 0;
    if (for_room) ++stats.released;
  }

  // NOTE [ A refused recording is tried again ]: the first refusal of e's
  // recording or capture run sets e to record at its next call (true); a
  // second is for good (false).
  bool record_again(Entry& e, absl::string_view what, absl::string_view why) {
    if (++e.refused_recordings >= 2) return false;
    e.recorded.reset();
    e.static_inputs.clear();
    e.calls = options.warmup - 1;
    fallback(e.signature, absl::StrCat(what, " refused (recorded again at the next call): ", why));
    return true;
  }

  // Makes the shared arena fit `need` bytes (and max_bytes, releasing least
  // recently used graphs other than `keep`); false when it cannot.
  bool make_room(Entry& keep, int64_t need, Device device) {
    auto total = [&](int64_t arena_bytes) {
      int64_t held = 0;
      for (const auto& [sig, e] : entries) held += e->held_bytes();
      return arena_bytes + held + (keep.recorded ? keep.recorded->stats.output_bytes : 0);
    };
    auto largest = [&] {
      int64_t n = std::max(need, pool->largest_need_except(this));
      for (const auto& [sig, e] : entries) {
        if (e->graph) n = std::max(n, e->arena_need());
      }
      return n;
    };
    if (options.max_bytes > 0) {
      while (total(largest()) > options.max_bytes) {
        Entry* lru = nullptr;
        for (const auto& [sig, e] : entries) {
          if (e.get() != &keep && e->graph && (lru == nullptr || e->last_used < lru->last_used)) lru = e.get();
        }
        if (lru == nullptr) return false;
        release(*lru, /*for_room=*/true);
      }
    }
    const int64_t size = largest();
    Ref<Storage>& arena = pool->arena;
    const bool too_small = !arena || arena->nbytes() < size || arena->device() != device;
    const bool too_large = arena && options.max_bytes > 0 && arena->nbytes() > size;
    if (too_small || too_large) {
      arena = Ref<Storage>();   // the graphs captured into it hold it until they move
      arena = Storage::allocate(std::max<int64_t>(size, 1), device);
      ++pool->generation;
    }
    return true;
  }

  std::vector<Tensor> replay(Entry& e, const std::vector<Tensor>& inputs) {
    Graph& g = *e.graph;
    if (e.arena_generation != pool->generation) {
      // Into the pool's arena, as it is now (another graph grew it, or moved
      // it to another device): a larger one first where this graph needs it.
      const Device device = g.internals().device;
      if ((!pool->arena || pool->arena->nbytes() < e.arena_need() || pool->arena->device() != device) &&
          !make_room(e, e.arena_need(), device)) {
        release(e, /*for_room=*/false);   // it is the one that does not fit
        fallback(e.signature, absl::StrFormat(
                                  "memory cap: its graph does not fit GraphedOptions::max_bytes = %d bytes",
                                  options.max_bytes));
        return eager(inputs);
      }
      absl::Status s = capture_internal::capture_into(step_of(e), capture_options(), g.internals(), pool->arena);
      if (!s.ok()) {
        make_eager_only(e, absl::StrCat("moving its graph into the shared arena failed: ", s.message()));
        return eager(inputs);
      }
      e.arena_generation = pool->generation;
      ++stats.recaptures;
      if (g.internals().stats.updated) ++stats.updates;
    }
    keep_held_outputs(e);
    // NOTE [ A replay that ran ] (capture/executable.h): graph.replay()'s
    // Status alone cannot say whether the step happened.
    const capture_internal::ReplayResult r = g.internals().replay_once();
    if (!r.ran && r.status.code() == absl::StatusCode::kFailedPrecondition) {
      // NOTE [ Graphs of another gradient state ]: a replay refused because a
      // parameter has gained (or lost) a gradient, hooks or requires_grad
      // since capture (a second head's first gradient, a hook added once, a
      // layer unfrozen) would be refused at every call from then on, though
      // a new capture records the step as it now runs. So the signature
      // starts over: four times in a row, and again whenever its graph has
      // replayed 16 times since (a state that changes at every call would
      // otherwise be recorded at every call; a schedule that unfreezes a
      // layer every few epochs restarts each time). Each call until its new
      // graph runs eagerly.
      if (g.internals().gradient_state_changed() && (e.leaf_restarts < 4 || e.replays >= 16)) {
        e.leaf_restarts = e.replays >= 16 ? 1 : e.leaf_restarts + 1;
        release(e, /*for_room=*/false);   // recorded again
        fallback(e.signature, absl::StrCat("replay refused, recorded again: ", r.status.message()));
        return eager(inputs);
      }
      fallback(e.signature, absl::StrCat("replay refused: ", r.status.message()));
      return eager(inputs);
    }
    if (!r.ran) throw Error(r.status);   // not launched (CUDA: an earlier call's bad data): nothing changed
    copy_back(e, inputs);
    ++stats.replays;
    ++e.replays;
    // Bad data met by a kernel: the step ran with those rows skipped and its
    // effects stay (above); thrown as the eager step would have thrown.
    if (!r.status.ok()) throw Error(r.status);
    return hand_out(e, inputs);
  }

  // The replay's outputs as the caller gets them: fresh handles on the
  // output region (a persistent tensor the step returned, as it is; one
  // over a static input, over the caller's input).
  std::vector<Tensor> hand_out(Entry& e, const std::vector<Tensor>& inputs) {
    Graph::Impl& g = e.graph->internals();
    e.returned.clear();
    for (const capture_internal::HeldTensor& held : g.outputs) {
      const Tensor& t = held.get();
      e.returned.push_back(g.output_arena && t.storage() == g.output_arena.get() ? view_on(g.output_arena, t)
                                                                               : over_caller_input(e, t, inputs));
    }
    e.region_refs = g.output_arena ? g.output_arena->use_count() : 0;
    return e.returned;
  }

  // NOTE [ Outputs over the static inputs ]: an eager call returns what the
  // step returned, so an input it returns (or a view of one) is the
  // caller's own tensor. A graphed step returns its static input instead,
  // which the signature's next call overwrites with that call's inputs:
  // kept outputs (labels gathered for an epoch's accuracy) would all read
  // the last batch. So such an output is handed out over the caller's
  // tensor, which copy_back() has brought up to date (the static input is
  // a contiguous clone of it), or as a copy where the caller's tensor is
  // laid out otherwise. Other outputs are returned as they are.
  static Tensor over_caller_input(const Entry& e, const Tensor& out, const std::vector<Tensor>& inputs) {
    if (!out.defined()) return out;
    for (size_t i = 0; i < e.static_inputs.size(); ++i) {
      const Tensor& in = e.static_inputs[i];
      if (out.storage() != in.storage()) continue;
      if (!inputs[i].is_contiguous() || !in.is_contiguous() || in.storage_offset() != 0) return out.clone();
      return capture_internal::view_at(inputs[i].impl()->storage, inputs[i].storage_offset() + out.storage_offset(),
                                       out);
    }
    return out;
  }

  // NOTE [ Outputs the caller keeps ]: an eager call returns new tensors,
  // so what a caller keeps from one call (losses gathered for a mean) must
  // not change at the next. A replay writes its outputs where the graph was
  // captured to, so before it runs, if the caller still holds the last
  // replay's outputs (or views of them), their bytes go to a new block and
  // the two storages exchange memory: the caller's handles read the copy,
  // the graph keeps its address. A caller that holds nothing costs nothing.
  void keep_held_outputs(Entry& e) {
    Graph::Impl& g = e.graph->internals();
    if (e.returned.empty() || !g.output_arena) return;
    bool kept = g.output_arena->use_count() > e.region_refs;   // a view made from an output
    for (const Tensor& t : e.returned) {
      kept = kept || (t.storage() == g.output_arena.get() && t.impl()->use_count() > 1);   // the handle itself
    }
    e.returned.clear();
    if (!kept) return;
    Ref<Storage> fresh = Storage::allocate(g.output_arena->nbytes(), g.output_arena->device());
    for (const capture_internal::HeldTensor& held : g.outputs) {
      if (held.get().storage() != g.output_arena.get()) continue;
      Tensor copy = view_on(fresh, held.get());
      copy.copy_(held.get());
    }
    g.output_arena->exchange_memory(*fresh);
    for (capture_internal::HeldTensor& held : g.outputs) {
      if (held.get().storage() == g.output_arena.get()) held = capture_internal::HeldTensor(view_on(fresh, held.get()));
    }
    g.output_arena = std::move(fresh);
    ++stats.kept_outputs;
  }

  std::vector<Tensor> call(const std::vector<Tensor>& inputs, const std::string& key) {
    for (size_t i = 0; i < inputs.size(); ++i) {
      ENCORE_CHECK(inputs[i].defined(), "graphed step: input %d is an undefined tensor", i);
    }
    const std::string sig = signature(inputs, key);
    // NOTE [ Nested captures ] (capture/capture.cpp): inside a step that
    // capture() records or captures, a replay or capture run of ours would
    // hide its kernels from the outer one; an eager call shows them all.
    if (capture_internal::inside_capture()) {
      fallback(sig, "called inside a step that capture() is recording or capturing: the enclosing capture "
                    "must see this step's kernels");
      return eager(inputs);
    }
    for (size_t i = 0; i < inputs.size(); ++i) {
      if (inputs[i].requires_grad()) {
        fallback(sig, absl::StrFormat("input %d requires grad: a graph's static inputs pass no gradient back to "
                                      "the caller's tensors (pass it detached to graph the step)",
                                      i));
        return eager(inputs);
      }
    }
    // Static inputs are clones, each its own: inputs sharing memory would
    // come apart (a write through one no longer seen through the other).
    for (size_t i = 0; i < inputs.size(); ++i) {
      for (size_t j = i + 1; j < inputs.size(); ++j) {
        if (inputs[i].storage() != inputs[j].storage()) continue;
        fallback(sig, absl::StrFormat("inputs %d and %d share memory: a graph's static inputs would hold them "
                                      "apart",
                                      i, j));
        return eager(inputs);
      }
    }
    auto it = entries.find(sig);
    if (it == entries.end()) {
      if (static_cast<int64_t>(entries.size()) >= options.max_graphs) {
        fallback(sig, absl::StrFormat("graph limit: %d signatures already (GraphedOptions::max_graphs)",
                                       options.max_graphs));
        return eager(inputs);
      }
      it = entries.emplace(sig, std::make_unique<Entry>()).first;
      it->second->signature = sig;
    }
    Entry& e = *it->second;
    e.last_used = ++clock;
    if (e.eager_only) {
      ++stats.eager_fallbacks;
      return eager(inputs);
    }
    ++e.calls;
    if (e.calls < options.warmup) {
      ++stats.eager_calls;
      return eager(inputs);
    }
    if (e.calls == options.warmup) return record(e, inputs);
    // NOTE [ Inputs that are the step's own state ]: a copy would hold this call's input apart.
    if (const std::string why = aliased_input(e, inputs); !why.empty()) {
      fallback(e.signature, why);
      return eager(inputs);
    }
    for (size_t i = 0; i < e.static_inputs.size(); ++i) e.static_inputs[i].copy_(inputs[i].detach());
    if (e.recorded != nullptr) {   // the call after the recorded one: capture, then replay
      if (!make_room(e, e.recorded->stats.arena_bytes, e.recorded->device)) {
        e.recorded.reset();
        e.static_inputs.clear();
        e.calls = 0;
        fallback(e.signature, absl::StrFormat(
                                  "memory cap: its graph does not fit GraphedOptions::max_bytes = %d bytes",
                                  options.max_bytes));
        return eager(inputs);
      }
      absl::Status s = capture_internal::capture_into(step_of(e), capture_options(), *e.recorded, pool->arena);
      if (!s.ok() && record_again(e, "capture", s.message())) return eager(inputs);
      if (!s.ok()) {
        make_eager_only(e, absl::StrCat("capture refused: ", s.message()));
        return eager(inputs);
      }
      e.graph.emplace(std::move(e.recorded));
      e.arena_generation = pool->generation;
      ++stats.captures;
    }
    return replay(e, inputs);
  }

  // The recorded call: static inputs made from this call's, the step run
  // once eagerly under the recorder, its plan kept for the next call.
  // NOTE [ Inputs that are the step's own state ]: exact, whatever the step
  // reaches of its inputs' memory itself.
  std::vector<Tensor> record(Entry& e, const std::vector<Tensor>& inputs) {
    if (const std::string why = aliased_input(e, inputs); !why.empty()) {   // a probe's or a released graph's
      e.calls = options.warmup - 1;   // record at the next call
      fallback(e.signature, why);
      return eager(inputs);
    }
    ++stats.eager_calls;
    e.static_inputs.clear();
    std::vector<bool> borrowed(inputs.size()), probes(inputs.size());
    for (size_t i = 0; i < inputs.size(); ++i) {
      bool b = false, p = false;
      e.static_inputs.push_back(recorded_input(inputs[i], e.probed, b, p));
      borrowed[i] = b, probes[i] = p;
    }
    std::vector<uint32_t> versions;
    for (const Tensor& t : e.static_inputs) versions.push_back(t.version());
    bool completed = false;
    // What the step returned, as an eager call returns it: a refused
    // recording may not have handed it on (an undefined output is refused
    // before the outputs are).
    std::vector<Tensor> returned;
    auto step = [&] {
      std::vector<Tensor> outs = fn(e.static_inputs);
      completed = true;
      returned = detached(outs);
      return outs;
    };
    std::vector<Tensor> outs;
    absl::StatusOr<std::unique_ptr<Graph::Impl>> recorded =
        capture_internal::record_and_plan(step, capture_options(), outs);
    if (!completed) throw Error(recorded.status());   // the step itself failed, as it would eagerly
    if (!recorded.ok()) outs = std::move(returned);
    returned.clear();
    e.written.clear();
    for (size_t i = 0; i < inputs.size(); ++i) {
      if (e.static_inputs[i].version() != versions[i]) e.written.push_back(i);
      // A copy's writes go back to the caller; a borrowed input's went there already.
      if (e.static_inputs[i].version() != versions[i] && !borrowed[i] && !probes[i]) {
        Tensor(inputs[i]).copy_(e.static_inputs[i]);
      }
    }
    for (Tensor& t : outs) t = over_caller_input(e, t, inputs);   // NOTE [ Outputs over the static inputs ]
    // NOTE [ A refused recording is tried again ]: what a first call
    // refuses may be gone at the next: state the step creates lazily (an
    // optimizer's moments, gradients) escapes the recorded call that
    // creates it, and with warmup = 1 that is the first call of a fresh
    // model, which then stayed eager for good; a parameter that got its
    // first gradient (another head's step) between the recorded call and
    // the capture call makes the capture run issue other kernels than the
    // recording. So a refused recording or capture run is recorded once more
    // at the next call (an eager step either way); refused twice, the
    // signature runs eagerly from then on.
    if (!recorded.ok() && record_again(e, "recording", recorded.status().message())) return outs;
    if (!recorded.ok()) {
      make_eager_only(e, absl::StrCat("capture refused: ", recorded.status().message()));
      return outs;
    }
    e.touched = touched_itself(**recorded, e.static_inputs);
    if (const std::string why = aliased_input(e, inputs); !why.empty()) {
      make_eager_only(e, why);
      return outs;
    }
    if (std::find(probes.begin(), probes.end(), true) != probes.end()) {   // a probe: record again, with copies
      e.probed = true;
      e.static_inputs.clear();
      e.calls = options.warmup - 1;
      return outs;
    }
    for (size_t i = 0; i < inputs.size(); ++i) {   // borrowed inputs get memory of their own
      if (!borrowed[i]) continue;
      Storage& s = *e.static_inputs[i].storage();
      Ref<Storage> own = Storage::allocate(s.nbytes(), s.device());
      capture_internal::view_at(own, 0, e.static_inputs[i]).copy_(e.static_inputs[i]);
      s.exchange_memory(*own);   // `own` now holds the borrowed pointer, which nobody frees
    }
    e.recorded = *std::move(recorded);
    return outs;
  }
};

GraphedStep::GraphedStep(Fn fn, GraphedOptions options) : impl_(std::make_unique<Impl>()) {
  ENCORE_CHECK(fn != nullptr, "GraphedStep: the step function is empty");
  ENCORE_CHECK(options.warmup >= 1, "GraphedStep: warmup must be at least 1 (the recorded call), got %d",
               options.warmup);
  ENCORE_CHECK(options.max_graphs >= 0 && options.max_bytes >= 0,
               "GraphedStep: max_graphs (%d) and max_bytes (%d) must be >= 0", options.max_graphs,
               options.max_bytes);
  ENCORE_CHECK(options.capture.verify_every >= 0,
               "GraphedStep: CaptureOptions::verify_every is %d; it counts replays (0: never verify)",
               options.capture.verify_every);
  ENCORE_CHECK(options.capture.inputs.empty(),
               "GraphedStep: CaptureOptions::inputs is the object's own (each call's inputs are copied)");
  impl_->fn = std::move(fn);
  impl_->options = std::move(options);
  impl_->pool = impl_->options.pool.impl_;
}

GraphedStep::~GraphedStep() = default;

std::vector<Tensor> GraphedStep::operator()(const std::vector<Tensor>& inputs, const std::string& key) {
  std::vector<Tensor> outs = impl_->call(inputs, key);
  impl_->refresh_stats();
  return outs;
}

const GraphedStats& GraphedStep::stats() const { return impl_->stats; }

std::vector<GraphedGraph> GraphedStep::graphs() const {
  std::vector<std::pair<int64_t, GraphedGraph>> held;
  for (const auto& [sig, e] : impl_->entries) {
    if (e->graph) held.push_back({e->last_used, {sig, e->graph->internals().stats, e->replays}});
  }
  std::sort(held.begin(), held.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<GraphedGraph> out;
  for (auto& [used, g] : held) out.push_back(std::move(g));
  return out;
}
const std::string& GraphedStep::last_fallback() const { return impl_->last_fallback; }

std::string GraphedStep::signature(const std::vector<Tensor>& inputs, const std::string& key) {
  std::vector<std::string> parts;
  for (const Tensor& t : inputs) {
    parts.push_back(t.defined() ? absl::StrCat(shape_str(t.shape()), " ", std::string(dtype_name(t.dtype())), " ",
                                               t.device().str())
                                : std::string("undefined"));
  }
  std::string s = absl::StrJoin(parts, ", ");
  if (!key.empty()) absl::StrAppend(&s, " | ", key);
  return s;
}

}  // namespace encore
