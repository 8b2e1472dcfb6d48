// GPT-2 in the Hugging Face layout: the name map between encore's Gpt and
// GPT2LMHeadModel, config.json, and the Conv1D transposes.
#include "encore/hf_gpt2.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <fstream>
#include <limits>
#include <optional>
#include <sstream>
#include <tuple>

#include <nlohmann/json.hpp>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "encore/autograd.h"
#include "encore/checkpoint.h"
#include "src/core/atomic_file.h"
#include "src/io/safetensors_file.h"

namespace encore::hf {
namespace {

using Json = nlohmann::json;

constexpr char kPrefix[] = "transformer.";

bool is_dir(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

std::string dir_of(const std::string& file) {
  const size_t slash = file.rfind('/');
  return slash == std::string::npos ? "." : file.substr(0, slash);
}

// One tensor of the model and its name in the Hugging Face layout.
struct Entry {
  std::string hf_name;     // without the "transformer." prefix; "lm_head.weight" is top level
  Tensor target;           // the model's parameter
  bool transposed;         // Conv1D: the file holds target^T
};

// encore's block-local names -> GPT-2's, and whether the weight is a Conv1D.
struct Rename {
  const char* ours;
  const char* theirs;
  bool conv1d;
};
constexpr Rename kBlockNames[] = {
    {"ln1.weight", "ln_1.weight", false},           {"ln1.bias", "ln_1.bias", false},
    {"attn.qkv.weight", "attn.c_attn.weight", true}, {"attn.qkv.bias", "attn.c_attn.bias", false},
    {"attn.proj.weight", "attn.c_proj.weight", true}, {"attn.proj.bias", "attn.c_proj.bias", false},
    {"ln2.weight", "ln_2.weight", false},           {"ln2.bias", "ln_2.bias", false},
    {"mlp.layers.0.weight", "mlp.c_fc.weight", true}, {"mlp.layers.0.bias", "mlp.c_fc.bias", false},
    {"mlp.layers.1.weight", "mlp.c_proj.weight", true}, {"mlp.layers.1.bias", "mlp.c_proj.bias", false},
};

std::vector<Entry> entries_of(const nn::Gpt& model) {
  std::vector<Entry> out;
  for (const auto& [name, p] : model.named_parameters()) {
    if (!absl::StartsWith(name, "blocks.")) {   // wte, wpe, ln_f, lm_head keep their names
      out.push_back({name, p, false});
      continue;
    }
    const size_t dot = name.find('.', 7);       // "blocks.<i>.<rest>"
    const std::string index = name.substr(7, dot - 7), rest = name.substr(dot + 1);
    const Rename* r = nullptr;
    for (const Rename& c : kBlockNames) {
      if (rest == c.ours) r = &c;
    }
    ENCORE_CHECK_CODE(r != nullptr, kInternal, "hf::gpt2: no GPT-2 name for parameter %s", name);
    out.push_back({absl::StrCat("h.", index, ".", r->theirs), p, r->conv1d});
  }
  return out;
}

// Tensors a GPT-2 file may hold that the model has no parameter for.
bool ignored(const std::string& hf_name, bool tied) {
  return absl::EndsWith(hf_name, ".attn.bias") || absl::EndsWith(hf_name, ".attn.masked_bias") ||
         (tied && hf_name == "lm_head.weight");
}

absl::Status refuse(absl::StatusCode code, const std::string& file, absl::string_view what) {
  return absl::Status(code, absl::StrCat("load_gpt2: ", file, ": ", what));
}

// The names and shapes of a weights file, in data order (SafetensorsFile::shapes).
using Listing = std::vector<std::pair<std::string, Shape>>;

// `config`'s sizes against the shapes of the weights file `file`: wte
// [vocab_size, n_embd], wpe [n_positions, n_embd] and the blocks h.0 ..
// h.<n_layer - 1>. These bound every parameter's size, so a Gpt built from a
// configuration that passes is about the size of the file.
absl::Status check_config(const std::string& file, const std::string& config, const nn::GptConfig& cfg,
                          const Listing& listing) {
  const std::pair<std::string, Shape>* wte = nullptr;   // as the file names it
  const std::pair<std::string, Shape>* wpe = nullptr;
  absl::flat_hash_set<int64_t> blocks;
  int64_t top = -1;   // the largest block index
  for (const auto& entry : listing) {
    absl::string_view bare = entry.first;
    absl::ConsumePrefix(&bare, kPrefix);
    int64_t i = 0;
    if (bare == "wte.weight") wte = &entry;
    if (bare == "wpe.weight") wpe = &entry;
    if (absl::ConsumePrefix(&bare, "h.") && absl::SimpleAtoi(bare.substr(0, bare.find('.')), &i) && i >= 0) {
      blocks.insert(i);
      top = std::max(top, i);
    }
  }
  for (auto [name, got, want, sizes] :
       {std::tuple{"wte.weight", wte, Shape{cfg.vocab_size, cfg.n_embd}, "vocab_size, n_embd"},
        std::tuple{"wpe.weight", wpe, Shape{cfg.block_size, cfg.n_embd}, "n_positions, n_embd"}}) {
    if (got == nullptr) return refuse(absl::StatusCode::kNotFound, file, absl::StrCat("missing tensor \"", name, "\""));
    if (got->second != want) {
      return refuse(absl::StatusCode::kInvalidArgument, file,
                    absl::StrCat("tensor \"", got->first, "\" has shape ", shape_str(got->second), " but ", config,
                                 " (", sizes, ") makes it ", shape_str(want)));
    }
  }
  if (static_cast<int64_t>(blocks.size()) != cfg.n_layer || top != cfg.n_layer - 1) {
    return refuse(absl::StatusCode::kInvalidArgument, file,
                  absl::StrCat("holds ", blocks.empty() ? "no blocks" : absl::StrCat(blocks.size(), " blocks"),
                               " h.<i>", blocks.empty() ? "" : absl::StrCat(" (largest i ", top, ")"), " but ",
                               config, " says n_layer ", cfg.n_layer));
  }
  return absl::OkStatus();
}

// load_gpt2_into with the file open and its header read (NOTE [ One file
// per load ] in training_checkpoint.cpp: names, shapes and tensors all come
// from the file that was at `file` when it was opened).
absl::Status load_listed(const std::string& file, const io::SafetensorsFile& weights, nn::Gpt& model) {
  const Listing listing = weights.shapes();
  absl::flat_hash_set<std::string> names;
  for (const auto& [name, shape] : listing) names.insert(name);
  const bool prefixed = std::any_of(listing.begin(), listing.end(), [](const auto& entry) {
    return absl::StartsWith(entry.first, kPrefix);
  });
  const bool tied = model.config().tied_head;
  std::vector<Entry> entries;
  absl::Status s = status_of([&] { entries = entries_of(model); });
  if (!s.ok()) return s;
  // Names first: a file that lacks some or holds others is refused before
  // anything is staged.
  std::vector<std::string> file_names, missing;
  absl::flat_hash_set<std::string> wanted;
  for (const Entry& e : entries) {
    file_names.push_back(e.hf_name == "lm_head.weight" || !prefixed ? e.hf_name : kPrefix + e.hf_name);
    wanted.insert(file_names.back());
    if (!names.contains(file_names.back())) missing.push_back(file_names.back());
  }
  if (!missing.empty()) {
    return refuse(absl::StatusCode::kNotFound, file,
                  absl::StrCat("missing tensor \"", missing.front(), "\"",
                               missing.size() > 1 ? absl::StrCat(" and ", missing.size() - 1, " more") : ""));
  }
  for (const auto& [n, shape] : listing) {
    if (wanted.contains(n)) continue;
    const std::string bare = absl::StartsWith(n, kPrefix) ? n.substr(sizeof kPrefix - 1) : n;
    if (!ignored(bare, tied)) {
      return refuse(absl::StatusCode::kInvalidArgument, file,
                    absl::StrCat("tensor \"", n, "\" is not part of this GPT-2 (", model.config().n_layer,
                                 " layers, ", tied ? "tied" : "untied", " head)"));
    }
  }
  // Staging tensors of the file's shapes in the model's dtype, on the CPU;
  // load_into checks shapes, converts dtypes and names the tensor on error.
  NamedTensors staging;
  for (size_t i = 0; i < entries.size(); ++i) {
    Shape shape = entries[i].target.shape();
    if (entries[i].transposed) std::swap(shape[0], shape[1]);
    staging.emplace_back(file_names[i], empty(shape, entries[i].target.dtype(), kCPU));
  }
  s = weights.load_into(staging, LoadOptions{.strict = false, .convert_dtypes = true});
  if (!s.ok()) return s;
  return status_of([&] {
    NoGradGuard no_grad;
    for (size_t i = 0; i < entries.size(); ++i) {
      const Tensor& src = staging[i].second;
      entries[i].target.copy_((entries[i].transposed ? src.transpose(0, 1) : src).to(entries[i].target.device()));
    }
  });
}

// NOTE [ Saving the pair ]: model.safetensors and config.json describe a
// model only together, and no rename replaces two files at once. save_gpt2
// writes both to temporaries and fsyncs them, then renames the weights and
// fsyncs the directory, then renames config.json and fsyncs it again:
// config.json is the commit record, so a config.json on disk was written
// after the weights it was saved with were in place. Both carry one save id
// (kSaveIdKey: a config.json key, a metadata key of the weights), so a
// crash between the renames, which leaves the new weights beside the old
// config.json, is refused by load_gpt2 (DataLoss) instead of loaded as the
// old configuration around the new weights: an n_head or a tied head that
// changed does not show in the weights' shapes.
constexpr char kSaveIdKey[] = "encore_save_id";

// transformers' GPT2Config default for resid_pdrop, embd_pdrop and attn_pdrop.
constexpr double kDefaultPdrop = 0.1;

// A config.json read: its GptConfig, and its save id ("" when it has none).
struct Config {
  nn::GptConfig cfg;
  std::string save_id;
};

absl::StatusOr<Config> read_config(const std::string& config_json) {
  std::ifstream in(config_json);
  if (!in) return absl::NotFoundError(absl::StrCat("read_gpt2_config: cannot read ", config_json));
  std::stringstream text;
  text << in.rdbuf();
  const Json j = Json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  auto bad = [&](absl::string_view what) {
    return absl::InvalidArgumentError(absl::StrCat("read_gpt2_config: ", config_json, ": ", what));
  };
  if (!j.is_object()) return bad("not a JSON object");
  if (j.contains("model_type") && j["model_type"] != "gpt2") {
    return bad(absl::StrCat("model_type is ", j["model_type"].dump(), ", not \"gpt2\""));
  }
  nn::GptConfig cfg;
  for (auto [key, field] : {std::pair{"vocab_size", &cfg.vocab_size}, std::pair{"n_positions", &cfg.block_size},
                            std::pair{"n_layer", &cfg.n_layer}, std::pair{"n_head", &cfg.n_head},
                            std::pair{"n_embd", &cfg.n_embd}}) {
    if (!j.contains(key) || !j[key].is_number_integer() || j[key].get<int64_t>() <= 0) {
      return bad(absl::StrCat("\"", key, "\" must be a positive integer"));
    }
    *field = j[key].get<int64_t>();
  }
  if (cfg.n_embd % cfg.n_head != 0) return bad("n_embd does not divide into n_head heads");
  if (cfg.n_embd > std::numeric_limits<int64_t>::max() / 4) {   // the MLP is 4 * n_embd wide
    return bad(absl::StrCat("n_embd is ", cfg.n_embd, ": too large (4 * n_embd does not fit in int64)"));
  }
  // NOTE [ Config keys that change the arithmetic ]: GPT2Config keys whose
  // other values make transformers compute another function than encore's
  // Gpt (tanh GELU, LayerNorm eps 1e-5, an MLP 4 * n_embd wide, attention
  // scores scaled by 1 / sqrt(head size) only, in the model's dtype) are
  // refused naming the key and its value, never ignored: a model that
  // loads computes what the checkpoint's model computes. Absent keys take
  // transformers' defaults, which are encore's.
  if (j.contains("activation_function")) {
    const Json& act = j["activation_function"];
    if (act != "gelu_new" && act != "gelu_pytorch_tanh" && act != "gelu_fast") {
      return bad(absl::StrCat("activation_function is ", act.dump(), ": encore's Gpt uses the tanh GELU only "
                              "(gelu_new, gelu_pytorch_tanh or gelu_fast)"));
    }
  }
  if (j.contains("layer_norm_epsilon") &&
      (!j["layer_norm_epsilon"].is_number() || j["layer_norm_epsilon"].get<double>() != 1e-5)) {
    return bad(absl::StrCat("layer_norm_epsilon is ", j["layer_norm_epsilon"].dump(),
                            ": encore's Gpt's LayerNorms use 1e-5 only"));
  }
  if (j.contains("n_inner") && !j["n_inner"].is_null() &&
      !(j["n_inner"].is_number_integer() && j["n_inner"].get<int64_t>() == 4 * cfg.n_embd)) {
    return bad(absl::StrCat("n_inner is ", j["n_inner"].dump(), ": encore's Gpt's MLP is 4 * n_embd = ",
                            4 * cfg.n_embd, " wide only (null also means that)"));
  }
  for (auto [key, value, what] :
       {std::tuple{"scale_attn_weights", true, "attention scores divided by sqrt(head size)"},
        std::tuple{"scale_attn_by_inverse_layer_idx", false, "no scaling of attention scores by 1 / (layer index + 1)"},
        std::tuple{"reorder_and_upcast_attn", false,
                   "the attention product computed in the model's dtype, scaled after the matmul"}}) {
    if (!j.contains(key)) continue;
    if (!j[key].is_boolean()) return bad(absl::StrCat(key, " is ", j[key].dump(), ", not true or false"));
    if (j[key] != value) {
      return bad(absl::StrCat(key, " is ", j[key].dump(), ": encore's Gpt computes GPT-2 with ", key, " ",
                              value ? "true" : "false", " only (", what, ")"));
    }
  }
  // GPT-2 has a dropout rate per place (embeddings, attention weights,
  // residual branches); encore's Gpt has one, GptConfig::dropout, used in
  // the same three places. Equal rates load as that rate; rates that differ
  // are refused, since no Gpt trains as that model would.
  const char* first = nullptr;
  for (const char* key : {"resid_pdrop", "embd_pdrop", "attn_pdrop"}) {
    double rate = kDefaultPdrop;
    if (j.contains(key)) {
      const Json& v = j[key];
      if (!v.is_number() || !(v.get<double>() >= 0.0 && v.get<double>() <= 1.0)) {
        return bad(absl::StrCat(key, " is ", v.dump(), ": a dropout rate must be a number in [0, 1]"));
      }
      rate = v.get<double>();
    }
    if (first == nullptr) {
      first = key;
      cfg.dropout = rate;
    } else if (rate != cfg.dropout) {
      auto shown = [&](const char* k) {
        return j.contains(k) ? j[k].dump() : absl::StrCat(kDefaultPdrop, " (absent: transformers' default)");
      };
      return bad(absl::StrCat(key, " is ", shown(key), " but ", first, " is ", shown(first),
                              ": encore's Gpt has one dropout rate (GptConfig::dropout) for the embeddings, "
                              "the attention weights and the residual branches"));
    }
  }
  if (j.contains("tie_word_embeddings") && !j["tie_word_embeddings"].is_boolean()) {
    return bad(absl::StrCat("tie_word_embeddings is ", j["tie_word_embeddings"].dump(), ", not true or false"));
  }
  cfg.tied_head = !j.contains("tie_word_embeddings") || j["tie_word_embeddings"] == true;
  return Config{cfg, j.contains(kSaveIdKey) && j[kSaveIdKey].is_string() ? j[kSaveIdKey].get<std::string>() : ""};
}

// A save id unique to one save_gpt2 call: the time, the pid and a counter.
std::string new_save_id() {
  static std::atomic<uint64_t> counter{0};
  const int64_t ns =
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
          .count();
  return absl::StrCat(ns, "-", ::getpid(), "-", counter.fetch_add(1));
}

}  // namespace

absl::StatusOr<nn::GptConfig> read_gpt2_config(const std::string& config_json) {
  absl::StatusOr<Config> c = read_config(config_json);
  if (!c.ok()) return c.status();
  return c->cfg;
}

absl::Status load_gpt2_into(const std::string& file, nn::Gpt& model) {
  absl::StatusOr<io::SafetensorsFile> weights = io::SafetensorsFile::open("load_gpt2_into", file);
  if (!weights.ok()) return weights.status();
  return load_listed(file, *weights, model);
}

absl::StatusOr<std::unique_ptr<nn::Gpt>> load_gpt2(const std::string& path, Device device) {
  const std::string dir = is_dir(path) ? path : dir_of(path);
  const std::string file = is_dir(path) ? dir + "/model.safetensors" : path;
  const std::string config = dir + "/config.json";
  absl::StatusOr<Config> read = read_config(config);
  if (!read.ok()) return read.status();
  nn::GptConfig& cfg = read->cfg;
  cfg.device = device;
  // The weights' header before the model: a configuration its weights do not
  // match (or no weights) is refused before the model is allocated.
  absl::StatusOr<io::SafetensorsFile> weights = io::SafetensorsFile::open("load_gpt2", file);
  if (!weights.ok()) return weights.status();
  const auto id = weights->metadata().find(kSaveIdKey);
  if (!read->save_id.empty() && id != weights->metadata().end() && id->second != read->save_id) {
    return refuse(absl::StatusCode::kDataLoss, file,
                  absl::StrCat("comes from another save_gpt2 than ", config, " (save ids ", id->second, " and ",
                               read->save_id, "): a save interrupted between its two renames leaves new weights "
                               "beside the old config.json (NOTE [ Saving the pair ] in src/io/hf_gpt2.cpp); "
                               "save the model again"));
  }
  absl::Status s = check_config(file, config, cfg, weights->shapes());
  if (!s.ok()) return s;
  std::unique_ptr<nn::Gpt> model;
  s = status_of([&] { model = std::make_unique<nn::Gpt>(cfg); });
  if (!s.ok()) return s;
  s = load_listed(file, *weights, *model);
  if (!s.ok()) return s;
  model->eval();   // as transformers' from_pretrained: train() to fine-tune with dropout
  return model;
}

absl::Status save_gpt2(const std::string& dir, const nn::Gpt& model) {
  if (::mkdir(dir.c_str(), 0777) == 0) {
    const size_t end = dir.find_last_not_of('/');   // "out/" names the directory "out"
    sync_parent_directory(end == std::string::npos ? dir : dir.substr(0, end + 1));
  } else if (errno != EEXIST) {
    return absl::ErrnoToStatus(errno, absl::StrCat("save_gpt2: cannot create ", dir));
  } else if (!is_dir(dir)) {
    return absl::ErrnoToStatus(ENOTDIR, absl::StrCat("save_gpt2: cannot use ", dir));
  }
  NamedTensors out;
  absl::Status s = status_of([&] {
    for (const Entry& e : entries_of(model)) {
      const std::string name = e.hf_name == "lm_head.weight" ? e.hf_name : kPrefix + e.hf_name;
      out.emplace_back(name, e.transposed ? e.target.detach().transpose(0, 1).contiguous() : e.target.detach());
    }
  });
  if (!s.ok()) return s;
  const std::string save_id = new_save_id();
  const nn::GptConfig& c = model.config();
  const Json config = {
      {"architectures", {"GPT2LMHeadModel"}}, {"model_type", "gpt2"}, {"activation_function", "gelu_new"},
      {"vocab_size", c.vocab_size},           {"n_positions", c.block_size}, {"n_ctx", c.block_size},
      {"n_layer", c.n_layer},                 {"n_head", c.n_head},          {"n_embd", c.n_embd},
      {"layer_norm_epsilon", 1e-5},           {"tie_word_embeddings", c.tied_head},
      {"resid_pdrop", c.dropout},             {"embd_pdrop", c.dropout},     {"attn_pdrop", c.dropout},
      {kSaveIdKey, save_id},
  };
  // NOTE [ Saving the pair ]: both written and fsynced, then the weights
  // renamed, then config.json. A staged file not committed is removed.
  absl::StatusOr<StagedFile> weights =
      io::stage_safetensors("save_gpt2", dir + "/model.safetensors", out, {{"format", "pt"}, {kSaveIdKey, save_id}});
  if (!weights.ok()) return weights.status();
  absl::StatusOr<StagedFile> config_file = stage_file("save_gpt2", dir + "/config.json", config.dump(2) + "\n");
  if (!config_file.ok()) return config_file.status();
  if (s = weights->commit(); !s.ok()) return s;
  return config_file->commit();
}

std::vector<int64_t> byte_token_ids(const std::string& text) {
  // GPT-2's bytes_to_unicode order: the printable ranges '!'..'~', 0xA1..0xAC
  // and 0xAE..0xFF first (ids 0..187), then every other byte in value order.
  int64_t id_of[256];
  int64_t next = 0;
  auto printable = [](int b) { return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE; };
  for (int b = 0; b < 256; ++b) {
    if (printable(b)) id_of[b] = next++;
  }
  for (int b = 0; b < 256; ++b) {
    if (!printable(b)) id_of[b] = next++;
  }
  std::vector<int64_t> ids;
  ids.reserve(text.size());
  for (unsigned char ch : text) ids.push_back(id_of[ch]);
  return ids;
}

}  // namespace encore::hf
