#include "capture/launch_match.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "encore/tensor.h"

namespace encore::capture_internal {
namespace {

Storage* operand(const LaunchRecord& launch, size_t i) {
  return i < launch.reads.size() ? launch.reads[i] : launch.writes[i - launch.reads.size()];
}
size_t operands(const LaunchRecord& launch) { return launch.reads.size() + launch.writes.size(); }

std::vector<PointerTarget> pointer_targets(const LaunchRecord& launch, const std::vector<ArgField>& fields) {
  std::vector<PointerTarget> out;
  for (const ArgField& f : fields) {
    if (f.kind != ArgKind::kPointer) continue;
    const char* p;
    std::memcpy(&p, static_cast<const char*>(launch.args) + f.offset, sizeof p);
    PointerTarget t;
    if (p != nullptr) {
      t.operand = PointerTarget::kOther;
      // Inside an operand first; then the address of an empty operand (the
      // warm-up allocates each its own, the arena may give them one address
      // or another's: which one says nothing about the work); then one past
      // an operand's end (an empty view), which may also be where the next
      // temporary starts.
      for (int pass = 0; pass < 3 && t.operand == PointerTarget::kOther; ++pass) {
        for (size_t i = 0; i < operands(launch); ++i) {
          const char* base = static_cast<const char*>(operand(launch, i)->data());
          const int64_t nbytes = operand(launch, i)->nbytes();
          const char* end = base + nbytes;
          if (base == nullptr) continue;
          if (pass == 1) {
            if (nbytes == 0 && p == base) {
              t = {PointerTarget::kEmpty, 0};
              break;
            }
            continue;
          }
          if (p >= base && (p < end || (pass == 2 && p == end))) {
            t = {static_cast<int32_t>(i), p - base};
            break;
          }
        }
      }
    }
    out.push_back(t);
  }
  return out;
}

std::string field_name(const ArgField& f) {
  return f.index < 0 ? std::string(f.name) : absl::StrCat(f.name, "[", f.index, "]");
}

std::string target_string(const PointerTarget& t) {
  if (t.operand == PointerTarget::kNull) return "null";
  if (t.operand == PointerTarget::kOther) return "memory outside its operands";
  if (t.operand == PointerTarget::kEmpty) return "an empty operand";
  return absl::StrFormat("operand %d at byte %d", t.operand, t.offset);
}

const char* operand_role(const KernelRecord& rec, size_t i) { return i < rec.reads.size() ? "reads" : "writes"; }

}  // namespace

void record_launch_identity(const LaunchRecord& launch, KernelRecord& rec) {
  const auto* bytes = static_cast<const unsigned char*>(launch.args);
  rec.args.assign(bytes, bytes + launch.args_size);
  rec.fields.clear();
  launch.collect_fields(launch.args, rec.fields);
  rec.targets = pointer_targets(launch, rec.fields);
  rec.storage_ids.clear();
  for (size_t i = 0; i < operands(launch); ++i) rec.storage_ids.push_back(operand(launch, i)->id());
}

std::string launch_difference(const KernelRecord& recorded, const LaunchRecord& now,
                              absl::Span<const int32_t> temporaries) {
  // Operands: the same count, and each the same temporary or the same persistent storage.
  if (now.reads.size() != recorded.reads.size() || now.writes.size() != recorded.writes.size()) {
    return absl::StrFormat("reads %d and writes %d tensors, the warm-up's read %d and wrote %d", now.reads.size(),
                           now.writes.size(), recorded.reads.size(), recorded.writes.size());
  }
  for (size_t i = 0; i < operands(now); ++i) {
    const int32_t was = i < recorded.reads.size() ? recorded.reads[i] : recorded.writes[i - recorded.reads.size()];
    const int32_t is = temporaries[i];
    const int64_t nbytes = operand(now, i)->nbytes();
    if (was == kPersistent && is == kPersistent) {
      if (recorded.storage_ids[i] == operand(now, i)->id()) continue;
      return absl::StrFormat(
          "%s another persistent tensor as operand %d (%d bytes) than the warm-up did: the step picks tensors on "
          "the host (double-buffered inputs chosen by a counter?), and every replay would use the capture run's "
          "choice. Copy the data into one tensor before replay() (x.copy_(next)), or capture one graph per choice",
          operand_role(recorded, i), i, nbytes);
    }
    if (was != is) {
      return absl::StrFormat("%s %s as operand %d (%d bytes) where the warm-up used %s", operand_role(recorded, i),
                             is == kPersistent ? "a persistent tensor" : absl::StrCat("temporary #", is), i, nbytes,
                             was == kPersistent ? "a persistent tensor" : absl::StrCat("temporary #", was));
    }
  }
  // Arguments: the same fields, the same non-pointer bytes, pointers into the same places.
  std::vector<ArgField> fields;
  now.collect_fields(now.args, fields);
  if (fields.size() != recorded.fields.size() || now.args_size != recorded.args.size()) {
    return "has other arguments than the warm-up's launch of it";
  }
  const std::vector<PointerTarget> targets = pointer_targets(now, fields);
  size_t pointer = 0;
  for (size_t j = 0; j < fields.size(); ++j) {
    const ArgField& f = fields[j];
    const ArgField& r = recorded.fields[j];
    if (f.offset != r.offset || f.size != r.size || f.kind != r.kind || std::strcmp(f.name, r.name) != 0) {
      return absl::StrFormat("has argument '%s' where the warm-up's launch had '%s'", field_name(f), field_name(r));
    }
    const void* was = recorded.args.data() + f.offset;
    const void* is = static_cast<const char*>(now.args) + f.offset;
    if (f.kind == ArgKind::kPointer) {
      const PointerTarget& t = targets[pointer];
      const PointerTarget& rt = recorded.targets[pointer];
      ++pointer;
      const bool same = t == rt && (t.operand != PointerTarget::kOther || std::memcmp(was, is, f.size) == 0);
      if (same) continue;
      return absl::StrFormat("differs in its pointer argument '%s': %s in the warm-up, %s in the capture run; the "
                             "step must issue the same work every time",
                             field_name(f), target_string(rt), target_string(t));
    }
    if (std::memcmp(was, is, f.size) == 0) continue;
    const bool scalar = f.kind == ArgKind::kFloat || f.kind == ArgKind::kBits;
    return absl::StrFormat(
        "differs in its argument '%s': %s in the recorded warm-up, %s in the capture run. %s", field_name(f),
        arg_value_string(r, recorded.args.data()), arg_value_string(f, now.args),
        scalar ? "A host number is baked into a captured kernel, and every replay would reuse the capture run's "
                 "value: keep it the same on every call, or hold it in a tensor that the step reads (a 0-d "
                 "tensor refilled with fill_() before each replay(), as the optimizers hold the learning rate)"
               : "A shape, dtype or mode chosen on the host would be frozen at the capture run's: the step must "
                 "issue the same work every time (no data-dependent shapes or control flow)");
  }
  return "";
}

std::vector<std::pair<std::string, std::string>> frozen_values(const KernelRecord& rec) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const ArgField& f : rec.fields) {
    if (f.kind == ArgKind::kFloat || f.kind == ArgKind::kBits) {
      out.emplace_back(field_name(f), arg_value_string(f, rec.args.data()));
    }
  }
  return out;
}

}  // namespace encore::capture_internal
