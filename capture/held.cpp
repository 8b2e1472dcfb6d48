// The table of graph references (NOTE [ Counting the graphs' own
// references ] in capture/held.h): one entry per held object, guarded by
// one lock, which replay() takes once for all its checks.
#include "capture/held.h"

#include <algorithm>
#include <memory>
#include <mutex>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "src/core/step_observer.h"

namespace encore::capture_internal {

struct HoldNode {
  const void* object = nullptr;
  int32_t holds = 0;   // Held references to the object
  // A Storage's entry: the held TensorImpls over it, each once while held
  // (their own entries, for their counts).
  std::vector<std::pair<const TensorImpl*, HoldNode*>> impls;
  // A TensorImpl's entry: the storage entry it is listed in.
  HoldNode* storage = nullptr;
};

namespace {

struct Table {
  std::mutex mu;
  absl::flat_hash_map<const void*, std::unique_ptr<HoldNode>> nodes;   // held object -> its entry

  HoldNode* find_or_add(const void* object) {
    std::unique_ptr<HoldNode>& n = nodes[object];
    if (!n) n = std::make_unique<HoldNode>(HoldNode{.object = object});
    return n.get();
  }
  void erase_if_unused(HoldNode* n) {
    if (n->holds == 0 && n->impls.empty()) nodes.erase(n->object);
  }
};

Table& table() {
  static Table* t = new Table;   // never destroyed: graphs may outlive static destruction order
  return *t;
}

}  // namespace

HoldNode* add_hold(const void* object, const TensorImpl* impl) {
  Table& t = table();
  std::lock_guard<std::mutex> lock(t.mu);
  HoldNode* n = t.find_or_add(object);
  if (n->holds++ == 0 && impl != nullptr && impl->storage) {
    n->storage = t.find_or_add(impl->storage.get());
    n->storage->impls.emplace_back(impl, n);
  }
  return n;
}

void drop_hold(HoldNode* n) {
  Table& t = table();
  std::lock_guard<std::mutex> lock(t.mu);
  if (--n->holds > 0) return;
  if (HoldNode* s = n->storage) {
    auto it = std::find_if(s->impls.begin(), s->impls.end(), [&](const auto& e) { return e.second == n; });
    if (it != s->impls.end()) s->impls.erase(it);
    n->storage = nullptr;
    t.erase_if_unused(s);
  }
  t.erase_if_unused(n);
}

HoldCheck::HoldCheck() { table().mu.lock(); }
HoldCheck::~HoldCheck() { table().mu.unlock(); }

bool HoldCheck::elsewhere(const Held<Storage>& s) const {
  int32_t graphs = s.node()->holds;
  for (const auto& [impl, node] : s.node()->impls) {
    // Still over this storage (Module::to() moves a TensorImpl to another)
    // and held by graphs only: its reference to the storage is theirs.
    if (impl->storage.get() == s.get() && impl->use_count() <= node->holds) ++graphs;
  }
  return s->use_count() > graphs;
}

bool HoldCheck::elsewhere(const Held<TensorImpl>& t) const { return t->use_count() > t.node()->holds; }

bool HoldCheck::elsewhere(const Held<HostFlag>& f) const { return f->use_count() > f.node()->holds; }

}  // namespace encore::capture_internal
