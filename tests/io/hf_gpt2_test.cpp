// GPT-2 in the Hugging Face layout: logits of a checked-in tiny checkpoint
// against a reference computed independently (tests/data/make_hf_gpt2_tiny.py,
// a plain-Python GPT-2 forward), the save/load round trip, refusals.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include <nlohmann/json.hpp>

#include "encore/encore.h"
#include "encore/hf_gpt2.h"
#include "tests/io/file_opens.h"
#include "tests/test_util.h"

namespace encore {
namespace {

using testing::expect_error;
using testing::values;

std::string data_dir() {
  const char* d = std::getenv("ENCORE_TEST_DATA");
  return std::string(d != nullptr ? d : "tests/data") + "/hf_gpt2_tiny";
}

nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return nlohmann::json::parse(s.str());
}

TEST(HfGpt2Test, LogitsMatchAnIndependentReference) {
  absl::StatusOr<std::unique_ptr<nn::Gpt>> gpt = hf::load_gpt2(data_dir());
  ASSERT_TRUE(gpt.ok()) << gpt.status();
  const nn::GptConfig& c = (*gpt)->config();
  EXPECT_EQ(c.vocab_size, 11);
  EXPECT_EQ(c.block_size, 8);
  EXPECT_EQ(c.n_layer, 2);
  EXPECT_TRUE(c.tied_head);
  const nlohmann::json ref = read_json(data_dir() + "/reference_logits.json");
  std::vector<int64_t> ids;
  std::vector<double> expected;
  for (const auto& row : ref["ids"]) for (int64_t id : row) ids.push_back(id);
  for (const auto& row : ref["logits"]) for (const auto& pos : row) for (double v : pos) expected.push_back(v);
  Tensor logits = (*gpt)->forward(from_vector<int64_t>(ids, {2, 5}));
  EXPECT_EQ(logits.shape(), (Shape{2, 5, 11}));
  testing::expect_near(logits, expected, 2e-5, 2e-5);   // f32 against double
}

TEST(HfGpt2Test, SavedFilesUseTheLayoutAndLoadBackBitForBit) {
  const std::string dir = ::testing::TempDir() + "/hf_gpt2_roundtrip";
  for (bool tied : {true, false}) {
    nn::Gpt gpt({.vocab_size = 13, .block_size = 6, .n_layer = 2, .n_head = 2, .n_embd = 8, .tied_head = tied,
                 .seed = 7});
    ASSERT_TRUE(hf::save_gpt2(dir, gpt).ok());
    absl::StatusOr<NamedTensors> file = load_safetensors(dir + "/model.safetensors");
    ASSERT_TRUE(file.ok()) << file.status();
    std::map<std::string, Tensor> by_name(file->begin(), file->end());
    ASSERT_TRUE(by_name.count("transformer.h.1.attn.c_attn.weight"));
    EXPECT_EQ(by_name["transformer.h.1.attn.c_attn.weight"].shape(), (Shape{8, 24}));   // Conv1D: [in, out]
    EXPECT_EQ(by_name["transformer.h.0.mlp.c_proj.weight"].shape(), (Shape{32, 8}));
    EXPECT_EQ(by_name.count("lm_head.weight"), tied ? 0u : 1u);
    const nlohmann::json config = read_json(dir + "/config.json");
    EXPECT_EQ(config["n_positions"], 6);
    EXPECT_EQ(config["tie_word_embeddings"], tied);
    absl::StatusOr<std::unique_ptr<nn::Gpt>> back = hf::load_gpt2(dir);
    ASSERT_TRUE(back.ok()) << back.status();
    Tensor ids = from_vector<int64_t>({1, 2, 3, 12, 0, 5}, {1, 6});
    EXPECT_EQ(values((*back)->forward(ids)), values(gpt.forward(ids)));
  }
}

TEST(HfGpt2Test, LoadsIntoAnExistingModelInPlaceAndConvertsDtypes) {
  absl::StatusOr<nn::GptConfig> cfg = hf::read_gpt2_config(data_dir() + "/config.json");
  ASSERT_TRUE(cfg.ok()) << cfg.status();
  nn::Gpt f32_model(*cfg);
  ASSERT_TRUE(hf::load_gpt2_into(data_dir() + "/model.safetensors", f32_model).ok());
  nn::Gpt bf16_model(*cfg);
  bf16_model.to(kBFloat16);
  const void* storage = bf16_model.parameters()[0].data_ptr();
  ASSERT_TRUE(hf::load_gpt2_into(data_dir() + "/model.safetensors", bf16_model).ok());
  EXPECT_EQ(bf16_model.parameters()[0].data_ptr(), storage);
  for (size_t i = 0; i < f32_model.parameters().size(); ++i) {
    EXPECT_EQ(values(bf16_model.parameters()[i]), values(f32_model.parameters()[i].to(kBFloat16))) << i;
  }
}

TEST(HfGpt2Test, MismatchesAreRefusedNamingTheTensor) {
  const std::string file = data_dir() + "/model.safetensors";
  absl::StatusOr<nn::GptConfig> cfg = hf::read_gpt2_config(data_dir() + "/config.json");
  ASSERT_TRUE(cfg.ok());
  nn::GptConfig three = *cfg;
  three.n_layer = 3;
  nn::Gpt deeper(three);
  absl::Status s = hf::load_gpt2_into(file, deeper);
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound) << s;
  EXPECT_NE(s.message().find("h.2."), absl::string_view::npos) << s;
  nn::GptConfig one = *cfg;
  one.n_layer = 1;
  nn::Gpt shallower(one);
  s = hf::load_gpt2_into(file, shallower);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("h.1."), absl::string_view::npos) << s;
  nn::GptConfig wide = *cfg;
  wide.n_embd = 16;
  nn::Gpt wider(wide);
  s = hf::load_gpt2_into(file, wider);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("wte.weight"), absl::string_view::npos) << s;
  // Configurations encore's Gpt cannot be.
  const std::string bad = ::testing::TempDir() + "/bad_config.json";
  for (auto [text, part] : {std::pair{R"({"model_type": "llama", "vocab_size": 5})", "model_type"},
                            std::pair{R"({"vocab_size": 5, "n_positions": 4, "n_layer": 1, "n_head": 1,
                                        "n_embd": 4, "activation_function": "relu"})", "activation_function"},
                            std::pair{R"({"vocab_size": 5, "n_positions": 4, "n_layer": 1, "n_head": 3,
                                        "n_embd": 4})", "n_head"},
                            std::pair{R"({"vocab_size": 5, "n_layer": 1, "n_head": 1, "n_embd": 4})", "n_positions"},
                            std::pair{R"({"vocab_size": 5, "n_positions": 4, "n_layer": 1, "n_head": 1,
                                        "n_embd": 4, "layer_norm_epsilon": 1e-6})", "layer_norm_epsilon"},
                            std::pair{R"({"vocab_size": 5, "n_positions": 4, "n_layer": 1, "n_head": 1,
                                        "n_embd": 4611686018427387904, "n_inner": 16})",
                                      "n_embd is 4611686018427387904: too large"},   // 4 * 2^62 overflowed
                            std::pair{"not json", "not a JSON object"}}) {
    std::ofstream(bad) << text;
    absl::StatusOr<nn::GptConfig> c = hf::read_gpt2_config(bad);
    EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument) << text;
    EXPECT_NE(c.status().message().find(part), absl::string_view::npos) << c.status();
  }
  EXPECT_EQ(hf::read_gpt2_config("/nonexistent/config.json").status().code(), absl::StatusCode::kNotFound);
}

// NOTE [ Config keys that change the arithmetic ]: each key whose value
// would make GPT-2 compute something encore's Gpt does not is refused,
// naming the file, the key and the value; the same keys at transformers'
// defaults are accepted.
TEST(HfGpt2Test, ConfigKeysThatChangeTheArithmeticAreRefused) {
  const std::string path = ::testing::TempDir() + "/arithmetic_config.json";
  const nlohmann::json base = {{"model_type", "gpt2"}, {"vocab_size", 5}, {"n_positions", 4},
                               {"n_layer", 1},         {"n_head", 2},     {"n_embd", 4}};
  nlohmann::json defaults = base;
  for (auto [key, value] : std::vector<std::pair<std::string, nlohmann::json>>{
           {"scale_attn_weights", true},
           {"scale_attn_by_inverse_layer_idx", false},
           {"reorder_and_upcast_attn", false},
           {"n_inner", nullptr},
           {"activation_function", "gelu_new"},
           {"layer_norm_epsilon", 1e-5},
           {"tie_word_embeddings", false}}) {
    defaults[key] = value;
  }
  std::ofstream(path, std::ios::trunc) << defaults.dump();
  absl::StatusOr<nn::GptConfig> cfg = hf::read_gpt2_config(path);
  ASSERT_TRUE(cfg.ok()) << cfg.status();
  EXPECT_FALSE(cfg->tied_head);
  defaults["n_inner"] = 16;   // 4 * n_embd, spelled out
  std::ofstream(path, std::ios::trunc) << defaults.dump();
  EXPECT_TRUE(hf::read_gpt2_config(path).ok());
  for (auto [key, value, shown] : std::vector<std::tuple<std::string, nlohmann::json, std::string>>{
           {"scale_attn_weights", false, "false"},
           {"scale_attn_by_inverse_layer_idx", true, "true"},
           {"reorder_and_upcast_attn", true, "true"},
           {"scale_attn_weights", "true", "\"true\""},   // a string is not a boolean
           {"reorder_and_upcast_attn", 0, "0"},
           {"tie_word_embeddings", "false", "\"false\""},
           {"n_inner", 12, "12"},
           {"n_inner", "16", "\"16\""},
           {"activation_function", "gelu", "\"gelu\""},   // the exact (erf) GELU
           {"activation_function", "relu", "\"relu\""},
           {"layer_norm_epsilon", 1e-6, "1e-06"}}) {
    SCOPED_TRACE(key + " " + shown);
    nlohmann::json edited = base;
    edited[key] = value;
    std::ofstream(path, std::ios::trunc) << edited.dump();
    const absl::Status s = hf::read_gpt2_config(path).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    for (const std::string& part : {path, key + " is " + shown}) {
      EXPECT_NE(s.message().find(part), absl::string_view::npos) << s << "\n" << part;
    }
    // load_gpt2 refuses it the same way, before it reads any weights.
    const std::string dir = ::testing::TempDir() + "/arithmetic_model";
    std::filesystem::create_directories(dir);
    std::ofstream(dir + "/config.json", std::ios::trunc) << edited.dump();
    EXPECT_EQ(hf::load_gpt2(dir).status().code(), absl::StatusCode::kInvalidArgument);
  }
}

// GPT-2's three dropout rates become GptConfig::dropout (before, they were
// not read and every loaded model had dropout 0): equal rates are that
// rate, absent ones transformers' default 0.1; rates that differ (encore's
// Gpt has one) or are not in [0, 1] are refused, naming the key and value.
TEST(HfGpt2Test, DropoutRatesAreReadOrRefused) {
  const std::string path = ::testing::TempDir() + "/dropout_config.json";
  const nlohmann::json base = {{"model_type", "gpt2"}, {"vocab_size", 5}, {"n_positions", 4},
                               {"n_layer", 1},         {"n_head", 2},     {"n_embd", 4}};
  auto read = [&](const nlohmann::json& config) {
    std::ofstream(path, std::ios::trunc) << config.dump();
    return hf::read_gpt2_config(path);
  };
  absl::StatusOr<nn::GptConfig> cfg = read(base);
  ASSERT_TRUE(cfg.ok()) << cfg.status();
  EXPECT_EQ(cfg->dropout, 0.1);   // transformers' default for all three
  nlohmann::json rates = base;
  for (const char* key : {"resid_pdrop", "embd_pdrop", "attn_pdrop"}) rates[key] = 0.25;
  cfg = read(rates);
  ASSERT_TRUE(cfg.ok()) << cfg.status();
  EXPECT_EQ(cfg->dropout, 0.25);
  for (const char* key : {"resid_pdrop", "embd_pdrop", "attn_pdrop"}) rates[key] = 0;
  cfg = read(rates);
  ASSERT_TRUE(cfg.ok()) << cfg.status();
  EXPECT_EQ(cfg->dropout, 0.0);
  for (auto [key, value, parts] : std::vector<std::tuple<std::string, nlohmann::json, std::vector<std::string>>>{
           {"attn_pdrop", 0.5, {"attn_pdrop is 0.5 but resid_pdrop is 0", "one dropout rate"}},
           {"resid_pdrop", 0.5, {"embd_pdrop is 0 but resid_pdrop is 0.5", "one dropout rate"}},
           {"embd_pdrop", 1.5, {"embd_pdrop is 1.5", "[0, 1]"}},
           {"resid_pdrop", -0.1, {"resid_pdrop is -0.1", "[0, 1]"}},
           {"attn_pdrop", "0.1", {"attn_pdrop is \"0.1\"", "[0, 1]"}}}) {
    SCOPED_TRACE(key + " " + value.dump());
    nlohmann::json edited = rates;
    edited[key] = value;
    const absl::Status s = read(edited).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    parts.push_back(path);
    for (const std::string& part : parts) EXPECT_NE(s.message().find(part), absl::string_view::npos) << s << "\n" << part;
  }
  nlohmann::json one_absent = base;   // the absent two are 0.1
  one_absent["attn_pdrop"] = 0.0;
  EXPECT_NE(read(one_absent).status().message().find("resid_pdrop is 0.1 (absent"), absl::string_view::npos)
      << read(one_absent).status();
}

// A Gpt trained with dropout saves its rate (resid_pdrop, embd_pdrop,
// attn_pdrop) and loads back with it, in eval mode as from_pretrained
// returns a model: its logits are the saved model's in eval mode.
TEST(HfGpt2Test, DropoutSurvivesASaveAndTheLoadedModelIsInEvalMode) {
  const std::string dir = ::testing::TempDir() + "/hf_gpt2_dropout";
  nn::Gpt gpt({.vocab_size = 13, .block_size = 6, .n_layer = 2, .n_head = 2, .n_embd = 8, .dropout = 0.25, .seed = 7});
  ASSERT_TRUE(hf::save_gpt2(dir, gpt).ok());
  absl::StatusOr<std::unique_ptr<nn::Gpt>> back = hf::load_gpt2(dir);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ((*back)->config().dropout, 0.25);
  EXPECT_FALSE((*back)->is_training());
  Tensor ids = from_vector<int64_t>({1, 2, 3, 12, 0, 5}, {1, 6});
  gpt.eval();
  EXPECT_EQ(values((*back)->forward(ids)), values(gpt.forward(ids)));
  (*back)->train();                                     // fine-tuning: dropout acts
  EXPECT_NE(values((*back)->forward(ids)), values(gpt.forward(ids)));
}

void write_config(const std::string& dir, const nlohmann::json& config) {
  std::ofstream(dir + "/config.json") << config.dump();
}

// save_gpt2 reports why it could not create the directory, by errno (a
// missing parent is NotFound, a file in the way FailedPrecondition), not
// PermissionDenied whatever the cause.
TEST(HfGpt2Test, ASaveThatCannotCreateItsDirectoryReportsWhy) {
  nn::Gpt gpt({.vocab_size = 13, .block_size = 6, .n_layer = 1, .n_head = 2, .n_embd = 8, .seed = 7});
  const std::string base = ::testing::TempDir() + "/hf_gpt2_mkdir";
  std::filesystem::remove_all(base);
  std::filesystem::create_directories(base);
  std::ofstream(base + "/a_file").put('x');
  for (auto [dir, code, text] :
       {std::tuple{base + "/no_such_parent/model", absl::StatusCode::kNotFound, "No such file or directory"},
        std::tuple{base + "/a_file/model", absl::StatusCode::kFailedPrecondition, "Not a directory"},
        std::tuple{base + "/a_file", absl::StatusCode::kFailedPrecondition, "Not a directory"}}) {
    const absl::Status s = hf::save_gpt2(dir, gpt);
    EXPECT_EQ(s.code(), code) << s;
    for (const std::string& part : {std::string("save_gpt2: "), dir, std::string(text)}) {
      EXPECT_NE(s.message().find(part), absl::string_view::npos) << s << "\n" << part;
    }
  }
}

// NOTE [ Saving the pair ] (src/io/hf_gpt2.cpp): a save leaves exactly the
// two files, no temporaries, both with the save's id; a pair from two saves
// (a save interrupted between its renames: new weights beside the old
// config.json) is refused by load_gpt2, though the shapes match, since an
// old config.json with another n_head would build another model.
TEST(HfGpt2Test, WeightsAndConfigOfDifferentSavesAreRefused) {
  const std::string dir = ::testing::TempDir() + "/hf_gpt2_pair", other = dir + "_other";
  for (const std::string& d : {dir, other}) std::filesystem::remove_all(d);
  nn::Gpt two_heads({.vocab_size = 13, .block_size = 6, .n_layer = 2, .n_head = 2, .n_embd = 8, .seed = 7});
  nn::Gpt four_heads({.vocab_size = 13, .block_size = 6, .n_layer = 2, .n_head = 4, .n_embd = 8, .seed = 8});
  ASSERT_TRUE(hf::save_gpt2(dir, two_heads).ok());
  ASSERT_TRUE(hf::save_gpt2(dir, two_heads).ok());   // over a previous save
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"config.json", "model.safetensors"}));
  ASSERT_TRUE(hf::load_gpt2(dir).ok());
  // The new weights of another save (four heads) beside the old config.json (two).
  ASSERT_TRUE(hf::save_gpt2(other, four_heads).ok());
  std::filesystem::copy_file(other + "/model.safetensors", dir + "/model.safetensors",
                             std::filesystem::copy_options::overwrite_existing);
  absl::StatusOr<std::unique_ptr<nn::Gpt>> mixed = hf::load_gpt2(dir);
  EXPECT_EQ(mixed.status().code(), absl::StatusCode::kDataLoss) << mixed.status();
  for (const std::string& part : {dir + "/model.safetensors", dir + "/config.json", std::string("save the model again")}) {
    EXPECT_NE(mixed.status().message().find(part), absl::string_view::npos) << mixed.status() << "\n" << part;
  }
  // What tells them apart: one id per save, in both files.
  absl::StatusOr<std::map<std::string, std::string>> metadata = load_safetensors_metadata(other + "/model.safetensors");
  ASSERT_TRUE(metadata.ok()) << metadata.status();
  const nlohmann::json config = read_json(other + "/config.json");
  ASSERT_TRUE(config.contains("encore_save_id"));
  EXPECT_EQ((*metadata)["encore_save_id"], config["encore_save_id"].get<std::string>());
  EXPECT_NE(read_json(dir + "/config.json")["encore_save_id"], config["encore_save_id"]);
  EXPECT_EQ((*metadata)["format"], "pt");
  // Files without an id (transformers' save_pretrained writes none) are not compared.
  nlohmann::json plain = read_json(other + "/config.json");
  plain.erase("encore_save_id");
  write_config(dir, plain);
  absl::StatusOr<std::unique_ptr<nn::Gpt>> loaded = hf::load_gpt2(dir);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  Tensor ids = from_vector<int64_t>({1, 2, 3, 12, 0, 5}, {1, 6});
  EXPECT_EQ(values((*loaded)->forward(ids)), values(four_heads.forward(ids)));
}

// GPT-2 XL's config.json (1.5e9 parameters, 6 GB in f32) beside an empty
// weights file: refused at once, naming the file, before any model is built.
TEST(HfGpt2Test, AHugeConfigWithEmptyWeightsFailsFast) {
  const std::string dir = ::testing::TempDir() + "/hf_gpt2_huge_config";
  std::filesystem::create_directories(dir);
  write_config(dir, {{"model_type", "gpt2"}, {"vocab_size", 50257}, {"n_positions", 1024}, {"n_layer", 48},
                     {"n_head", 25}, {"n_embd", 1600}});
  std::ofstream(dir + "/model.safetensors", std::ios::trunc).close();
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<std::unique_ptr<nn::Gpt>> gpt = hf::load_gpt2(dir);
  const std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(gpt.status().code(), absl::StatusCode::kDataLoss) << gpt.status();
  EXPECT_NE(gpt.status().message().find(dir + "/model.safetensors"), absl::string_view::npos) << gpt.status();
  EXPECT_LT(took.count(), 1.0);
}

// A config.json whose sizes the weights do not have is refused from the
// weights' header, naming the file, the tensor or the count, and the config.
TEST(HfGpt2Test, AConfigTheWeightsDoNotMatchIsRefusedBeforeBuilding) {
  const std::string dir = ::testing::TempDir() + "/hf_gpt2_mismatch";
  nn::Gpt gpt({.vocab_size = 13, .block_size = 6, .n_layer = 2, .n_head = 2, .n_embd = 8, .seed = 7});
  ASSERT_TRUE(hf::save_gpt2(dir, gpt).ok());
  const nlohmann::json saved = read_json(dir + "/config.json");
  const std::string file = dir + "/model.safetensors", config = dir + "/config.json";
  for (auto [key, value, parts] :
       {std::tuple{"n_layer", 48, std::vector<std::string>{"2 blocks h.<i> (largest i 1)", "n_layer 48"}},
        std::tuple{"n_embd", 1600, std::vector<std::string>{"wte.weight\" has shape [13, 8]", "[13, 1600]"}},
        std::tuple{"vocab_size", 50257, std::vector<std::string>{"wte.weight\"", "[50257, 8]"}},
        std::tuple{"n_positions", 1024, std::vector<std::string>{"wpe.weight\" has shape [6, 8]", "[1024, 8]"}}}) {
    SCOPED_TRACE(key);
    nlohmann::json edited = saved;
    edited[key] = value;
    if (std::string(key) == "n_embd") edited["n_head"] = 1;
    write_config(dir, edited);
    absl::StatusOr<std::unique_ptr<nn::Gpt>> loaded = hf::load_gpt2(dir);
    EXPECT_EQ(loaded.status().code(), absl::StatusCode::kInvalidArgument) << loaded.status();
    parts.push_back(file);
    parts.push_back(config);
    for (const std::string& part : parts) {
      EXPECT_NE(loaded.status().message().find(part), absl::string_view::npos) << loaded.status() << "\n" << part;
    }
  }
  write_config(dir, saved);
  EXPECT_TRUE(hf::load_gpt2(dir).ok());
  // Missing tensors are refused before anything is staged, so before shapes are compared.
  nn::Gpt deeper_and_wider({.vocab_size = 13, .block_size = 6, .n_layer = 3, .n_head = 2, .n_embd = 16});
  absl::Status s = hf::load_gpt2_into(file, deeper_and_wider);
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound) << s;
  EXPECT_NE(s.message().find("missing tensor \"transformer.h.2."), absl::string_view::npos) << s;
}

// NOTE [ One file per load ] (src/io/training_checkpoint.cpp): load_gpt2
// reads the weights' header (to check config.json against it), then the
// tensors, from one open file; so does load_gpt2_into. Seen by inotify.
TEST(HfGpt2Test, LoadsOpenEachFileOnce) {
  const std::string dir = ::testing::TempDir() + "/hf_gpt2_opened_once";
  nn::Gpt gpt({.vocab_size = 13, .block_size = 6, .n_layer = 2, .n_head = 2, .n_embd = 8, .seed = 7});
  ASSERT_TRUE(hf::save_gpt2(dir, gpt).ok());
  const std::string weights = dir + "/model.safetensors";
  absl::StatusOr<std::unique_ptr<nn::Gpt>> loaded;
  int config_opens = 0;
  const int weight_opens = testing::opens_of(weights, [&] {
    config_opens = testing::opens_of(dir + "/config.json", [&] { loaded = hf::load_gpt2(dir); });
  });
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(weight_opens, 1);
  EXPECT_EQ(config_opens, 1);
  absl::Status s;
  EXPECT_EQ(testing::opens_of(weights, [&] { s = hf::load_gpt2_into(weights, **loaded); }), 1);
  EXPECT_TRUE(s.ok()) << s;
}

TEST(HfGpt2Test, ByteTokenIdsFollowGpt2sByteOrder) {
  // '!' is token 0, 'A' (0x41) 32, '~' 93, 0xA1 94, 0xAE 106, 0xFF 187; then
  // the other bytes in value order: 0x00 is 188, ' ' (0x20) 220, 0x7F 221.
  EXPECT_EQ(hf::byte_token_ids(std::string("!A~\xA1\xAE\xFF", 6)), (std::vector<int64_t>{0, 32, 93, 94, 106, 187}));
  EXPECT_EQ(hf::byte_token_ids(std::string("\0 \x7F\xAD", 4)), (std::vector<int64_t>{188, 220, 221, 255}));
}

}  // namespace
}  // namespace encore
