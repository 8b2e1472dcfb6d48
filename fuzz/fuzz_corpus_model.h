// The model the checkpoint fuzzer loads into and fuzz/make_corpus.cpp saves
// its seed checkpoints from: a 4-8-3 MLP with AdamW, on the CPU.
//
//   encore::fuzz::CorpusModel run;
//   run.step();                                   // one training step
//   (void)encore::save_checkpoint("seed", run.model, run.opt.get());
#pragma once

#include <memory>

#include "encore/encore.h"

namespace encore::fuzz {

struct CorpusModel {
  CorpusModel() : model({4, 8, 3}), opt(std::make_unique<optim::AdamW>(model.parameters())) {}
  // One AdamW step on a fixed batch of 2.
  void step() {
    opt->zero_grad();
    cross_entropy(model.forward(ones({2, 4})), from_vector<int64_t>({0, 2})).backward();
    opt->step();
  }
  nn::Mlp model;
  std::unique_ptr<optim::AdamW> opt;
};

}  // namespace encore::fuzz
