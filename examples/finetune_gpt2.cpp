// Fine-tunes a GPT-2 checkpoint in the Hugging Face layout on a text file,
// every step after the warm-up a replay of the captured step, and saves the
// result in the same layout (loadable by transformers' from_pretrained).
//
//   build/examples/finetune_gpt2 --model=path/to/gpt2 --text=my.txt --out=finetuned/
//   build/examples/finetune_gpt2                 # no --model: a small stand-in checkpoint
//
// The model directory holds model.safetensors and config.json (the hub's
// gpt2 files, or save_pretrained's). Token ids: --ids names a file of
// whitespace-separated GPT-2 token ids (from tiktoken's or transformers'
// GPT-2 tokenizer); without it the text is encoded byte by byte
// (encore::hf::byte_token_ids: valid GPT-2 ids without BPE merges). Without
// --model the example first writes a freshly initialised 2-layer GPT-2 with
// a 256-token vocabulary (the byte tokens) in the Hugging Face layout to a
// temporary directory and loads it from there, so the load path runs
// without a download. Exit status 1 when the loss does
// not fall or a replay fell back to eager.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <random>
#include <sstream>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_format.h"
#include "encore/encore.h"
#include "encore/hf_gpt2.h"
#include "examples/example_main.h"
#include "tools/flags.h"

ABSL_FLAG(std::string, model, "", "Hugging Face GPT-2 directory (model.safetensors + config.json); empty: a stand-in.");
ABSL_FLAG(std::string, text, "/usr/share/dict/words", "Text to fine-tune on.");
ABSL_FLAG(std::string, ids, "", "File of whitespace-separated GPT-2 token ids to train on instead of --text.");
ABSL_FLAG(std::string, out, "", "Directory to save the fine-tuned model to (Hugging Face layout); empty: none.");
ABSL_FLAG(int64_t, steps, 60, "Fine-tuning steps, 1..10000000.");
ABSL_FLAG(int64_t, batch, 8, "Sequences per step, 1..4096.");
ABSL_FLAG(int64_t, seq, 32, "Tokens per sequence, 1..65536 (cut to the model's n_positions).");
ABSL_FLAG(double, lr, 1e-3, "AdamW learning rate, in [0, 1e6].");
ABSL_FLAG(uint64_t, seed, 1, "Seed for batches.");
ABSL_FLAG(std::string, device, "cpu", "cpu or cuda.");

namespace {

using namespace encore;

absl::StatusOr<std::vector<int64_t>> token_ids() {
  const std::string ids_path = absl::GetFlag(FLAGS_ids);
  std::ifstream in(ids_path.empty() ? absl::GetFlag(FLAGS_text) : ids_path, std::ios::binary);
  if (!in) return absl::NotFoundError("cannot open " + (ids_path.empty() ? absl::GetFlag(FLAGS_text) : ids_path));
  std::stringstream ss;
  ss << in.rdbuf();
  if (ids_path.empty()) return hf::byte_token_ids(ss.str());
  std::vector<int64_t> ids;
  for (int64_t id; ss >> id;) ids.push_back(id);
  if (!ss.eof()) return absl::InvalidArgumentError(ids_path + ": not a list of integer token ids");
  return ids;
}

// A stand-in for a downloaded checkpoint: a fresh GPT-2 written in the
// Hugging Face layout (then loaded like any other).
absl::StatusOr<std::string> stand_in_checkpoint() {
  char dir[] = "/tmp/encore-gpt2-XXXXXX";
  if (mkdtemp(dir) == nullptr) return absl::InternalError("cannot make a temporary directory");
  nn::Gpt fresh({.vocab_size = 256, .block_size = 64, .n_layer = 2, .n_head = 4, .n_embd = 64, .seed = 1});
  absl::Status s = hf::save_gpt2(dir, fresh);
  if (!s.ok()) return s;
  return std::string(dir);
}


// The flags' ranges (tools/flags.h: one message, exit 2).
absl::Status check_flags() {
  const std::string device = absl::GetFlag(FLAGS_device);
  for (absl::Status s : {tools::in_range("--steps", absl::GetFlag(FLAGS_steps), 1, 10000000),
                         tools::in_range("--batch", absl::GetFlag(FLAGS_batch), 1, 4096),
                         tools::in_range("--seq", absl::GetFlag(FLAGS_seq), 1, 65536),
                         tools::finite_in_range("--lr", absl::GetFlag(FLAGS_lr), 0, 1e6)}) {
    if (!s.ok()) return s;
  }
  return examples::check_device_flag(device);
}

int run() {
  const Device device = absl::GetFlag(FLAGS_device) == "cpu" ? kCPU : Device::cuda(0);
  std::string dir = absl::GetFlag(FLAGS_model);
  if (dir.empty()) {
    absl::StatusOr<std::string> made = stand_in_checkpoint();
    if (!made.ok()) {
      std::cerr << made.status() << "\n";
      return 1;
    }
    dir = *made;
    std::printf("no --model: wrote a stand-in GPT-2 (vocab 256, 2 layers) to %s\n", dir.c_str());
  }
  absl::StatusOr<std::unique_ptr<nn::Gpt>> loaded = hf::load_gpt2(dir, device);
  absl::StatusOr<std::vector<int64_t>> ids = token_ids();
  if (!loaded.ok() || !ids.ok()) {
    std::cerr << (!loaded.ok() ? loaded.status() : ids.status()) << "\n";
    return 1;
  }
  nn::Gpt& gpt = **loaded;
  gpt.train();   // loaded in eval mode (as from_pretrained): fine-tune with config.json's dropout
  const nn::GptConfig& cfg = gpt.config();
  const int64_t B = absl::GetFlag(FLAGS_batch), T = std::min(absl::GetFlag(FLAGS_seq), cfg.block_size);
  const auto bad_id = std::find_if(ids->begin(), ids->end(), [&](int64_t id) { return id < 0 || id >= cfg.vocab_size; });
  if (bad_id != ids->end() || static_cast<int64_t>(ids->size()) < T + 2) {
    std::cerr << (bad_id != ids->end() ? "token id " + std::to_string(*bad_id) + " is outside the vocabulary of " +
                                             std::to_string(cfg.vocab_size)
                                       : std::string("too few tokens to train on"))
              << "\n";
    return 1;
  }
  int64_t params = 0;
  for (const Tensor& p : gpt.parameters()) params += p.numel();
  std::printf("loaded %s: %lld layers, %lld heads, width %lld, vocab %lld, %.2fM parameters; %zu tokens\n",
              dir.c_str(), static_cast<long long>(cfg.n_layer), static_cast<long long>(cfg.n_head),
              static_cast<long long>(cfg.n_embd), static_cast<long long>(cfg.vocab_size), params / 1e6, ids->size());

  optim::AdamW opt(gpt.parameters(), {.lr = absl::GetFlag(FLAGS_lr), .weight_decay = 0.0});
  GraphedStep train([&](const std::vector<Tensor>& in) {
    opt.zero_grad();
    Tensor loss = gpt.loss(in[0], in[1]);
    loss.backward();
    opt.step();
    return std::vector<Tensor>{loss};
  });
  std::mt19937_64 rng(absl::GetFlag(FLAGS_seed));
  std::uniform_int_distribution<size_t> start(0, ids->size() - static_cast<size_t>(T) - 2);
  auto batch = [&] {
    std::vector<int64_t> xs, ys;
    for (int64_t b = 0; b < B; ++b) {
      const size_t s = start(rng);
      xs.insert(xs.end(), ids->begin() + s, ids->begin() + s + T);
      ys.insert(ys.end(), ids->begin() + s + 1, ids->begin() + s + T + 1);
    }
    return std::vector<Tensor>{from_vector<int64_t>(xs, {B, T}, device), from_vector<int64_t>(ys, {B, T}, device)};
  };
  const int64_t steps = absl::GetFlag(FLAGS_steps);
  Progress progress({.total = steps, .every = std::max<int64_t>(1, steps / 4), .unit = "tokens", .label = "fine-tune"});
  float first = 0, last = 0;
  double replay_ms = 0;
  for (int64_t step = 1; step <= steps; ++step) {
    std::vector<Tensor> in = batch();
    const auto t0 = std::chrono::steady_clock::now();
    last = train(in)[0].item<float>();
    if (step > 3) replay_ms += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (step == 1) first = last;
    progress.update(step, last, B * T);
  }
  const GraphedStats& s = train.stats();
  // Steps 1-2 run eagerly and step 3 captures: with 3 steps or fewer no replay was timed.
  const std::string per_step =
      steps > 3 ? absl::StrFormat("%.2f ms/step", replay_ms / static_cast<double>(steps - 3)) : std::string("n/a");
  std::printf("loss %.4f -> %.4f; %lld replays (%s), %lld eager calls, %lld fallbacks\n", first, last,
              static_cast<long long>(s.replays), per_step.c_str(), static_cast<long long>(s.eager_calls),
              static_cast<long long>(s.eager_fallbacks));
  if (const std::string out = absl::GetFlag(FLAGS_out); !out.empty()) {
    absl::Status saved = hf::save_gpt2(out, gpt);
    if (!saved.ok()) {
      std::cerr << saved << "\n";
      return 1;
    }
    std::printf("saved the fine-tuned model to %s/ (model.safetensors, config.json)\n", out.c_str());
  }
  return last < first && s.eager_fallbacks == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) { return examples::example_main("finetune_gpt2", argc, argv, check_flags, run); }
