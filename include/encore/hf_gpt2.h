// GPT-2 checkpoints in the Hugging Face layout: load a `model.safetensors`
// (with the `config.json` beside it) into an nn::Gpt, and save one back, so
// weights trained with transformers load here and ours load there.
//
//   // A directory as save_pretrained writes it (or the hub's gpt2/ files):
//   absl::StatusOr<std::unique_ptr<encore::nn::Gpt>> gpt = encore::hf::load_gpt2("gpt2/");
//   if (!gpt.ok()) std::cerr << gpt.status() << "\n";       // names the file and the tensor
//   encore::Tensor logits = (*gpt)->forward(ids);             // ids [B, T]: GPT-2 token ids (eval mode)
//   (*gpt)->train();                                          // to fine-tune: dropout at config.json's rate
//   absl::Status s = encore::hf::save_gpt2("finetuned/", **gpt);   // model.safetensors + config.json
//
// Token ids come from a GPT-2 tokenizer (tiktoken's or transformers' "gpt2"
// BPE, run wherever the text is prepared); encore has none. byte_token_ids()
// gives the ids of the 256 single-byte tokens, a valid (unmerged) encoding
// of any text.
//
// The layout (GPT2LMHeadModel): names "h.<i>.attn.c_attn.weight", ... with or
// without a "transformer." prefix; the Conv1D weights (c_attn, c_proj, c_fc)
// stored [in, out], the transpose of encore's Linear [out, in]; the head tied
// to wte ("lm_head.weight" absent, or present and ignored when tied); the
// causal-mask buffers "h.<i>.attn.bias" / ".masked_bias" ignored. encore's
// Gpt is GPT-2's architecture: pre-norm blocks, LayerNorm eps 1e-5, the tanh
// GELU ("gelu_new"), learned positions.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "encore/device.h"
#include "encore/nn.h"

namespace encore::hf {

// The GptConfig of a config.json: vocab_size, n_positions (block_size),
// n_layer, n_head, n_embd, tie_word_embeddings (default true). Refused
// (InvalidArgument, naming the file, the key and its value): a missing or
// non-integer size, model_type not "gpt2", and every key whose value makes
// GPT-2 compute something encore's Gpt does not: an activation_function
// other than gelu_new / gelu_pytorch_tanh / gelu_fast, a layer_norm_epsilon
// other than 1e-5, an n_inner other than null or 4 * n_embd,
// scale_attn_weights false, scale_attn_by_inverse_layer_idx true,
// reorder_and_upcast_attn true (and any of these three flags, or
// tie_word_embeddings, that is not a JSON boolean). The dropout rates
// resid_pdrop, embd_pdrop and attn_pdrop (each 0.1 when absent, transformers'
// default) become GptConfig::dropout, which the Gpt applies in those three
// places: refused when they differ (the Gpt has one rate) or one is not a
// number in [0, 1). NotFound when the file cannot be read.
[[nodiscard]] absl::StatusOr<nn::GptConfig> read_gpt2_config(const std::string& config_json);

// `path` is a directory holding model.safetensors and config.json, or a
// .safetensors file with config.json in its directory. Builds a Gpt of that
// configuration on `device` and loads the weights (load_gpt2_into). The
// weights' header is read first: a config.json its tensors do not match
// (wte [vocab_size, n_embd], wpe [n_positions, n_embd], blocks h.0 ..
// h.<n_layer - 1>) or a missing or malformed file is refused, naming the
// file, before the model is allocated. Weights and a config.json that both
// carry a save id (save_gpt2 writes one) and whose ids differ come from two
// saves, as a save interrupted between its renames leaves them: refused
// (DataLoss), since the old config.json may describe another model around
// weights of the same shapes.
// The model is returned in eval mode, as transformers' from_pretrained
// returns it: forward() is deterministic; call train() before fine-tuning
// for dropout at config.json's rate (GptConfig::dropout).
[[nodiscard]] absl::StatusOr<std::unique_ptr<nn::Gpt>> load_gpt2(const std::string& path, Device device = kCPU);

// Copies the weights of the safetensors file `file` into `model` in place
// (handles and captured graphs stay valid), converting float dtypes (F32,
// F16, BF16, F64) to the model's. Strict: every tensor of the model must be
// in the file with its shape (Conv1D weights transposed), and the file may
// hold nothing else but the ignored names above. Errors name the file and
// the tensor: NotFound (missing), InvalidArgument (shape, dtype, extra);
// names are checked before anything is staged.
[[nodiscard]] absl::Status load_gpt2_into(const std::string& file, nn::Gpt& model);

// Writes dir/model.safetensors (GPT2LMHeadModel names with the
// "transformer." prefix, f32 or the model's dtype, "lm_head.weight" only
// when the head is not tied) and dir/config.json; creates dir if needed
// (an error says why, by errno: NotFound for a missing parent, ...). Both
// files get one new "encore_save_id" (a config.json key and a metadata key
// of the weights). Both are written to temporaries and fsynced before
// either is renamed into place; then the weights, then config.json, each
// rename made durable (NOTE [ Saving the pair ] in src/io/hf_gpt2.cpp). An
// error before the renames leaves both previous files as they were (and no
// temporary); a crash or a failed config.json rename after the weights'
// leaves a pair that load_gpt2 refuses, as above.
[[nodiscard]] absl::Status save_gpt2(const std::string& dir, const nn::Gpt& model);

// The GPT-2 id of each byte value: the first 256 tokens of GPT-2's
// vocabulary are the single bytes, in the order of its byte-to-unicode table.
// Encodes text as ids a GPT-2 model accepts, without BPE merges.
std::vector<int64_t> byte_token_ids(const std::string& text);

}  // namespace encore::hf
