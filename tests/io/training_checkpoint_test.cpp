// Model + optimizer checkpoints: a run saved and loaded into fresh objects
// continues bit for bit; mismatches are refused with the tensor named.
#include <gtest/gtest.h>

#include <cstdint>
#include <atomic>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "encore/encore.h"
#include "tests/backends/cuda_test_util.h"
#include "tests/io/file_opens.h"
#include "tests/test_util.h"

namespace encore {
namespace {

struct TinyRun {
  explicit TinyRun(uint64_t seed, Device device = kCPU) : model(seeded_widths(seed)) {
    model.to(device);   // before the optimizer takes the parameters
    opt = std::make_unique<optim::AdamW>(model.parameters());
  }
  static std::vector<int64_t> seeded_widths(uint64_t seed) {
    manual_seed(seed);   // Mlp draws its init from the default generator
    return {6, 8, 3};
  }
  void step(const Tensor& x, const Tensor& y) {
    opt->zero_grad();
    cross_entropy(model.forward(x), y).backward();
    opt->step();
  }
  nn::Mlp model;
  std::unique_ptr<optim::AdamW> opt;
};

void expect_same_parameters(const TinyRun& a, const TinyRun& b) {
  std::vector<Tensor> pa = a.model.parameters(), pb = b.model.parameters();
  ASSERT_EQ(pa.size(), pb.size());
  for (size_t i = 0; i < pa.size(); ++i) {
    std::vector<float> va = pa[i].to_vector<float>(), vb = pb[i].to_vector<float>();
    EXPECT_EQ(std::memcmp(va.data(), vb.data(), va.size() * sizeof(float)), 0) << "parameter " << i;
  }
}

// Three steps, save, load into a fresh run (other init, no optimizer state),
// then one more step on each: the same bits.
void expect_a_loaded_run_continues_bit_for_bit(Device device) {
  Tensor x = testing::random_tensor({4, 6}, 1).to(device);
  Tensor y = from_vector<int64_t>({0, 1, 2, 1}).to(device);
  const std::string path = ::testing::TempDir() + "/run_" + device.str() + ".safetensors";
  TinyRun a(1, device);
  for (int i = 0; i < 3; ++i) a.step(x, y);
  ASSERT_TRUE(save_checkpoint(path, a.model, a.opt.get()).ok());
  TinyRun b(2, device);
  absl::Status st = load_checkpoint(path, b.model, b.opt.get());
  ASSERT_TRUE(st.ok()) << st;
  for (const Tensor& p : b.model.parameters()) EXPECT_EQ(p.device(), device);
  a.step(x, y);
  b.step(x, y);
  expect_same_parameters(a, b);
}

TEST(TrainingCheckpointTest, ALoadedRunContinuesBitForBit) { expect_a_loaded_run_continues_bit_for_bit(kCPU); }

TEST(CudaTrainingCheckpointTest, ALoadedRunContinuesBitForBit) {
  ENCORE_SKIP_WITHOUT_GPU();
  expect_a_loaded_run_continues_bit_for_bit(Device::cuda(0));
}

// A checkpoint written from the GPU loads into a CPU run (and back) with
// every value and the optimizer's step count intact.
TEST(CudaTrainingCheckpointTest, CheckpointsMoveBetweenDevicesExactly) {
  ENCORE_SKIP_WITHOUT_GPU();
  Tensor x = testing::random_tensor({4, 6}, 1);
  Tensor y = from_vector<int64_t>({0, 1, 2, 1});
  const std::string path = ::testing::TempDir() + "/gpu_run.safetensors";
  TinyRun gpu(1, Device::cuda(0));
  for (int i = 0; i < 3; ++i) gpu.step(x.to(Device::cuda(0)), y.to(Device::cuda(0)));
  ASSERT_TRUE(save_checkpoint(path, gpu.model, gpu.opt.get()).ok());
  TinyRun cpu(2);
  absl::Status st = load_checkpoint(path, cpu.model, cpu.opt.get());
  ASSERT_TRUE(st.ok()) << st;
  expect_same_parameters(gpu, cpu);
  const std::string back = ::testing::TempDir() + "/cpu_run.safetensors";
  ASSERT_TRUE(save_checkpoint(back, cpu.model, cpu.opt.get()).ok());
  TinyRun gpu2(3, Device::cuda(0));
  st = load_checkpoint(back, gpu2.model, gpu2.opt.get());
  ASSERT_TRUE(st.ok()) << st;
  gpu.step(x.to(Device::cuda(0)), y.to(Device::cuda(0)));
  gpu2.step(x.to(Device::cuda(0)), y.to(Device::cuda(0)));
  expect_same_parameters(gpu, gpu2);   // same device, same state: the same next step
}

// Write failures reach the caller (issue #17): a missing directory, a
// device that is not a regular file.
TEST(TrainingCheckpointTest, SavesThatCannotBeWrittenReturnTheError) {
  TinyRun run(3);
  const absl::Status missing = save_checkpoint(::testing::TempDir() + "/no_such_dir/run.safetensors", run.model,
                                               run.opt.get());
  EXPECT_EQ(missing.code(), absl::StatusCode::kNotFound) << missing;
  EXPECT_NE(missing.message().find("no_such_dir/run.safetensors"), absl::string_view::npos) << missing;
  const absl::Status full = save_checkpoint("/dev/full", run.model, run.opt.get());
  EXPECT_EQ(full.code(), absl::StatusCode::kFailedPrecondition) << full;
  EXPECT_NE(full.message().find("/dev/full"), absl::string_view::npos) << full;
}

TEST(TrainingCheckpointTest, MismatchesAreRefusedNamingTheTensor) {
  const std::string path = ::testing::TempDir() + "/model_only.safetensors";
  TinyRun a(1);
  ASSERT_TRUE(save_checkpoint(path, a.model).ok());
  TinyRun b(1);
  absl::Status st = load_checkpoint(path, b.model, b.opt.get());   // the file has no optimizer state
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("optim."), absl::string_view::npos) << st;
  nn::Mlp other(std::vector<int64_t>{6, 9, 3});
  st = load_checkpoint(path, other);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("model.layers.0.weight"), absl::string_view::npos) << st;
  EXPECT_TRUE(load_checkpoint(path, b.model).ok());
}

// ---- exact resume: model, optimizer, schedule and generators ----

// A GPT run with dropout, AdamW, clipping and a warm-up + cosine schedule,
// fed by its own data generator: everything a resumed run must restore.
struct GptRun {
  GptRun(uint64_t seed, Device device)
      : model(nn::GptConfig{.vocab_size = 11, .block_size = 8, .n_layer = 1, .n_head = 2, .n_embd = 16,
                            .dropout = 0.2, .seed = seed, .device = device}),
        opt(model.parameters(), {.lr = 1e-2}),
        sched(opt, {.base_lr = 1e-2, .min_lr = 1e-3, .warmup_steps = 2, .total_steps = 8}),
        data(seed + 100, device),
        device(device) {
    manual_seed(seed + 200);   // dropout draws from the default generators
  }
  TrainingState state() { return {.optimizer = &opt, .schedule = &sched, .generators = {{"data", &data}}}; }
  float step() {
    Tensor ids = argmax(rand({2, 9, 11}, kFloat32, device, &data), 2);   // [B, T + 1] token ids
    opt.zero_grad();
    Tensor loss = model.loss(ids.slice(1, 0, 8), ids.slice(1, 1, 9));
    loss.backward();
    optim::clip_grad_norm(opt.params(), 1.0);
    opt.step();
    sched.step();
    return loss.item<float>();
  }
  nn::Gpt model;
  optim::AdamW opt;
  optim::WarmupCosine sched;
  Generator data;
  Device device;
};

std::vector<std::vector<float>> parameter_values(const nn::Module& m) {
  std::vector<std::vector<float>> out;
  for (const Tensor& p : m.parameters()) out.push_back(p.to_vector<float>());
  return out;
}

// The uninterrupted eager run: its losses and final parameters.
struct EagerReference {
  std::vector<float> losses;
  std::vector<std::vector<float>> final_params;
};

EagerReference eager_reference(Device device, int steps) {
  EagerReference ref;
  GptRun run(1, device);
  for (int i = 0; i < steps; ++i) ref.losses.push_back(run.step());
  ref.final_params = parameter_values(run.model);
  return ref;
}

void expect_loss_bits(float loss, const EagerReference& ref, int step) {
  EXPECT_EQ(std::memcmp(&loss, &ref.losses[step], sizeof(float)), 0) << "step " << step << ": " << loss << " vs "
                                                                     << ref.losses[step];
}

// A Run (GptRun or GraphedGptRun) saved after k steps and loaded into a
// fresh one built from other seeds (other weights, data and dropout streams
// until loaded; with `pretrained`, after a step of its own), then run to
// ref's end: the losses and final parameters are ref's bit for bit.
template <typename Run>
void expect_resumed_after(int k, bool pretrained, const EagerReference& ref, Device device) {
  const std::string path = ::testing::TempDir() + "/resume_" + device.str() + ".safetensors";
  {
    Run first(1, device);
    for (int i = 0; i < k; ++i) first.step();
    ASSERT_TRUE(save_checkpoint(path, first.model, first.state()).ok());
  }
  Run resumed(7, device);
  if (pretrained) resumed.step();
  absl::Status st = load_checkpoint(path, resumed.model, resumed.state());
  ASSERT_TRUE(st.ok()) << st;
  EXPECT_EQ(resumed.sched.current_step(), k);
  for (int i = k; i < static_cast<int>(ref.losses.size()); ++i) expect_loss_bits(resumed.step(), ref, i);
  EXPECT_TRUE(parameter_values(resumed.model) == ref.final_params);
}

// Saved at step k (k = 0: before the first optimizer step) and resumed in
// fresh objects built from other seeds, the run's losses and final
// parameters equal the uninterrupted run's bit for bit; also when the
// checkpoint is loaded into a run that had already trained.
void expect_resume_is_exact(Device device) {
  constexpr int kSteps = 6;
  const EagerReference ref = eager_reference(device, kSteps);
  for (int k : {0, 1, 4}) {
    for (bool pretrained : {false, true}) {
      SCOPED_TRACE(::testing::Message() << "saved at step " << k << (pretrained ? ", loaded into a trained run" : ""));
      expect_resumed_after<GptRun>(k, pretrained, ref, device);
    }
  }
}

TEST(TrainingCheckpointTest, AResumedRunEqualsTheUninterruptedRunBitForBit) { expect_resume_is_exact(kCPU); }

TEST(CudaTrainingCheckpointTest, AResumedRunEqualsTheUninterruptedRunBitForBit) {
  ENCORE_SKIP_WITHOUT_GPU();
  expect_resume_is_exact(Device::cuda(0));
}

// The same run through a GraphedStep (calls 1-2 eager, 3 captured and
// replayed, then replays): the data and the schedule outside the step,
// dropout, clipping and AdamW inside it.
struct GraphedGptRun : GptRun {
  GraphedGptRun(uint64_t seed, Device device) : GptRun(seed, device) {}
  float step() {
    Tensor ids = argmax(rand({2, 9, 11}, kFloat32, device, &data), 2);
    // Copies: two views of one tensor would make every call eager.
    std::vector<Tensor> out = train({ids.slice(1, 0, 8).clone(), ids.slice(1, 1, 9).clone()});
    sched.step();
    return out[0].item<float>();
  }
  GraphedStep train{[this](const std::vector<Tensor>& in) {
                      opt.zero_grad();
                      Tensor loss = model.loss(in[0], in[1]);
                      loss.backward();
                      optim::clip_grad_norm(opt.params(), 1.0);
                      opt.step();
                      return std::vector<Tensor>{loss};
                    },
                    {.log = false}};
};

// Saved after k graphed calls (before any, after the eager ones, after the
// capture, after replays) and resumed in a fresh run whose GraphedStep starts
// over (eager calls first), the losses and final parameters equal the eager
// uninterrupted run's bit for bit: replays advance the optimizer's step, the
// dropout generator and the parameters where a checkpoint reads them.
void expect_graphed_resume_is_exact(Device device) {
  constexpr int kSteps = 7;
  const EagerReference ref = eager_reference(device, kSteps);
  {
    GraphedGptRun whole(1, device);
    for (int i = 0; i < kSteps; ++i) expect_loss_bits(whole.step(), ref, i);
    EXPECT_EQ(whole.train.stats().replays, kSteps - 2);   // the run did replay
    EXPECT_TRUE(parameter_values(whole.model) == ref.final_params);
  }
  for (int k : {0, 2, 3, 5}) {
    SCOPED_TRACE(::testing::Message() << "saved after " << k << " graphed calls");
    expect_resumed_after<GraphedGptRun>(k, /*pretrained=*/false, ref, device);
  }
}

TEST(TrainingCheckpointTest, AGraphedRunResumesBitForBit) { expect_graphed_resume_is_exact(kCPU); }

TEST(CudaTrainingCheckpointTest, AGraphedRunResumesBitForBit) {
  ENCORE_SKIP_WITHOUT_GPU();
  expect_graphed_resume_is_exact(Device::cuda(0));
}

TEST(TrainingCheckpointTest, ModelOnlyLoadOfATrainingCheckpoint) {
  const std::string path = ::testing::TempDir() + "/training_for_model.safetensors";
  GptRun run(1, kCPU);
  run.step();
  ASSERT_TRUE(save_checkpoint(path, run.model, run.state()).ok());
  GptRun fresh(3, kCPU);
  absl::Status st = load_checkpoint(path, fresh.model);   // optimizer, schedule and generators are ignored
  ASSERT_TRUE(st.ok()) << st;
  EXPECT_TRUE(parameter_values(fresh.model) == parameter_values(run.model));
  EXPECT_EQ(fresh.sched.current_step(), 0);
  // Strict within the model: a model of another shape is refused naming the tensor.
  nn::Gpt other(nn::GptConfig{.vocab_size = 11, .block_size = 8, .n_layer = 2, .n_head = 2, .n_embd = 16});
  st = load_checkpoint(path, other);
  EXPECT_EQ(st.code(), absl::StatusCode::kNotFound) << st;
  EXPECT_NE(st.message().find("model.blocks.1."), absl::string_view::npos) << st;
  // Not strict: the second block keeps its values and is reported missing.
  LoadReport report;
  st = load_checkpoint(path, other, TrainingState{.default_generators = false}, {.strict = false}, &report);
  ASSERT_TRUE(st.ok()) << st;
  EXPECT_FALSE(report.missing.empty());
  for (const std::string& m : report.missing) EXPECT_NE(m.find("model.blocks.1."), std::string::npos) << m;
  EXPECT_TRUE(report.unexpected.empty());
}

// A layer with a running statistic (persistent) and a derived table (not).
class WithStatistics : public nn::Module {
 public:
  WithStatistics() {
    weight = register_parameter("weight", ones({3}));
    running_mean = register_buffer("running_mean", zeros({3}));
    table = register_buffer("table", ones({3}), /*persistent=*/false);
  }
  Tensor weight, running_mean, table;
};

TEST(TrainingCheckpointTest, PersistentBuffersAreSavedAndLoadedInPlace) {
  const std::string path = ::testing::TempDir() + "/buffers.safetensors";
  WithStatistics saved;
  saved.running_mean.copy_(from_vector<float>({0.25f, -1.5f, 3.0f}, {3}));
  ASSERT_TRUE(save_checkpoint(path, saved, TrainingState{.default_generators = false}).ok());
  absl::StatusOr<NamedTensors> file = load_safetensors(path);
  ASSERT_TRUE(file.ok()) << file.status();
  std::vector<std::string> names;
  for (auto& [n, t] : *file) names.push_back(n);
  EXPECT_EQ(names, (std::vector<std::string>{"model.weight", "model.running_mean"}));   // no derived table
  WithStatistics loaded;
  const void* storage = loaded.running_mean.data_ptr();
  absl::Status st = load_checkpoint(path, loaded);
  ASSERT_TRUE(st.ok()) << st;
  EXPECT_EQ(loaded.running_mean.data_ptr(), storage);           // in place: captured graphs stay valid
  EXPECT_EQ(testing::values(loaded.running_mean), (std::vector<double>{0.25, -1.5, 3.0}));
}

// A checkpoint written in float64 (as NumPy writes it) loads with
// LoadOptions::convert_dtypes, rounded to the model's f32, and is refused
// without it (Unimplemented, naming the tensor and the option).
TEST(TrainingCheckpointTest, AFloat64CheckpointLoadsOnlyWhenConverting) {
  const std::string path = ::testing::TempDir() + "/float64.safetensors";
  const std::vector<double> weight = {0.1, -2.5, 1.0 / 3.0}, mean = {1e-3, 0.0, 7.0};
  std::string header = R"({"__metadata__":{"format":"encore-training-checkpoint"},)"
                       R"("model.weight":{"dtype":"F64","shape":[3],"data_offsets":[0,24]},)"
                       R"("model.running_mean":{"dtype":"F64","shape":[3],"data_offsets":[24,48]}})";
  header.append((8 - header.size() % 8) % 8, ' ');
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    const uint64_t n = header.size();   // little-endian, as the format and this host are
    out.write(reinterpret_cast<const char*>(&n), 8);
    out << header;
    out.write(reinterpret_cast<const char*>(weight.data()), 24);
    out.write(reinterpret_cast<const char*>(mean.data()), 24);
  }
  WithStatistics m;
  const TrainingState no_state{.default_generators = false};
  absl::Status st = load_checkpoint(path, m, no_state);
  EXPECT_EQ(st.code(), absl::StatusCode::kUnimplemented) << st;
  EXPECT_NE(st.message().find("\"model.running_mean\""), absl::string_view::npos) << st;
  EXPECT_NE(st.message().find("convert_dtypes"), absl::string_view::npos) << st;
  EXPECT_EQ(testing::values(m.weight), (std::vector<double>{1, 1, 1}));   // nothing written
  LoadReport report;
  st = load_checkpoint(path, m, no_state, {.convert_dtypes = true}, &report);
  ASSERT_TRUE(st.ok()) << st;
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(m.weight.to_vector<float>()[i], static_cast<float>(weight[i])) << i;
    EXPECT_EQ(m.running_mean.to_vector<float>()[i], static_cast<float>(mean[i])) << i;
  }
  EXPECT_EQ(report.converted, (std::vector<std::string>{"model.weight: f64 -> f32", "model.running_mean: f64 -> f32"}));
}

TEST(TrainingCheckpointTest, ARunWithoutItsPartsIsRefusedNamingThem) {
  const std::string path = ::testing::TempDir() + "/model_and_opt.safetensors";
  GptRun run(1, kCPU);
  ASSERT_TRUE(save_checkpoint(path, run.model, &run.opt).ok());   // no schedule, no generators
  GptRun fresh(3, kCPU);
  absl::Status st = load_checkpoint(path, fresh.model, fresh.state());
  EXPECT_EQ(st.code(), absl::StatusCode::kNotFound) << st;
  EXPECT_NE(st.message().find("schedule.step"), absl::string_view::npos) << st;
  EXPECT_TRUE(load_checkpoint(path, fresh.model, &fresh.opt).ok());
}

// The bytes of every tensor a run's checkpoint holds: parameters, optimizer
// state, the schedule's step and the generators.
std::vector<std::vector<uint8_t>> run_bytes(GptRun& run) {
  NamedTensors all = run.opt.state();
  for (const auto& [name, p] : run.model.state_tensors()) all.emplace_back(name, p);
  all.emplace_back("data", run.data.state());
  all.emplace_back("default", default_generator(kCPU).state());
  all.emplace_back("step", scalar_tensor(static_cast<double>(run.sched.current_step()), kInt64));
  std::vector<std::vector<uint8_t>> out;
  for (const auto& [name, t] : all) {
    Tensor c = t.to(kCPU).contiguous();
    const auto* p = static_cast<const uint8_t*>(c.data_ptr());
    out.emplace_back(p, p + c.numel() * dtype_size(c.dtype()));
  }
  return out;
}

// A file whose parts all match but whose "schedule.step" is negative (which
// the schedule refuses) is refused before anything is copied: parameters,
// optimizer state, generators and the schedule keep every bit.
TEST(TrainingCheckpointTest, ANegativeScheduleStepIsRefusedBeforeAnythingIsWritten) {
  const std::string path = ::testing::TempDir() + "/negative_step.safetensors";
  {
    GptRun saved(1, kCPU);
    for (int i = 0; i < 2; ++i) saved.step();
    ASSERT_TRUE(save_checkpoint(path, saved.model, saved.state()).ok());
  }
  absl::StatusOr<NamedTensors> file = load_safetensors(path);
  absl::StatusOr<std::map<std::string, std::string>> metadata = load_safetensors_metadata(path);
  ASSERT_TRUE(file.ok() && metadata.ok());
  for (auto& [name, t] : *file) {
    if (name == "schedule.step") t = scalar_tensor(-3, kInt64);
  }
  ASSERT_TRUE(save_safetensors(path, *file, *metadata).ok());
  GptRun run(3, kCPU);
  run.step();
  const std::vector<std::vector<uint8_t>> before = run_bytes(run);
  absl::Status st = load_checkpoint(path, run.model, run.state());
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_NE(st.message().find(path), absl::string_view::npos) << st;
  EXPECT_NE(st.message().find("\"schedule.step\": is -3"), absl::string_view::npos) << st;
  EXPECT_TRUE(run_bytes(run) == before);
  // Without the schedule the step is not read, and the rest loads.
  absl::Status rest = load_checkpoint(path, run.model, {.optimizer = &run.opt, .generators = {{"data", &run.data}}});
  EXPECT_TRUE(rest.ok()) << rest;
}

// Rewrites `path` with tensor `name` replaced by `value` (a corrupt or
// hand-edited file), keeping its metadata.
void rewrite(const std::string& path, const std::string& name, const Tensor& value) {
  absl::StatusOr<NamedTensors> file = load_safetensors(path);
  absl::StatusOr<std::map<std::string, std::string>> metadata = load_safetensors_metadata(path);
  ASSERT_TRUE(file.ok() && metadata.ok());
  bool found = false;
  for (auto& [n, t] : *file) {
    if (n == name) t = value, found = true;
  }
  ASSERT_TRUE(found) << name;
  ASSERT_TRUE(save_safetensors(path, *file, *metadata).ok());
}

// NOTE [ Checked values ]: scalars that set_lr, set_step or the next step()
// would refuse or break on are refused (InvalidArgument, naming the file,
// the tensor and the value) before anything is copied, like a negative
// "schedule.step"; the edges that are valid load.
TEST(TrainingCheckpointTest, ScalarsTheObjectsRefuseAreRefusedBeforeAnythingIsWritten) {
  const std::string path = ::testing::TempDir() + "/bad_scalars.safetensors";
  const std::string saved = path + ".saved";
  {
    GptRun run(1, kCPU);
    for (int i = 0; i < 2; ++i) run.step();
    ASSERT_TRUE(save_checkpoint(saved, run.model, run.state()).ok());
  }
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  const int64_t max = std::numeric_limits<int64_t>::max();
  struct Case {
    std::string name;
    Tensor value;
    std::string message;   // empty: the value is valid and loads
  };
  const std::vector<Case> cases = {
      {"optim.lr", scalar_tensor(nan, kFloat32), "\"optim.lr\": is nan; a learning rate is finite and >= 0"},
      {"optim.lr", scalar_tensor(-3, kFloat32), "\"optim.lr\": is -3;"},
      {"optim.lr", scalar_tensor(inf, kFloat32), "\"optim.lr\": is inf;"},
      {"optim.lr", scalar_tensor(-inf, kFloat32), "\"optim.lr\": is -inf;"},
      {"optim.lr", scalar_tensor(0, kFloat32), ""},
      {"optim.step", from_vector<int64_t>({-1}, Shape{}), "\"optim.step\": is -1; a count is >= 0"},
      {"optim.step", from_vector<int64_t>({max}, Shape{}), "\"optim.step\": is 9223372036854775807; its next increment would overflow"},
      {"optim.step", from_vector<int64_t>({max - 1}, Shape{}), ""},
      {"rng.data", from_vector<int64_t>({7, -1}, {2}), "\"rng.data\": has offset -1; a generator's offset is >= 0"},
      {"rng.default.cpu", from_vector<int64_t>({7, std::numeric_limits<int64_t>::min()}, {2}),
       "\"rng.default.cpu\": has offset -9223372036854775808;"},
      {"rng.data", from_vector<int64_t>({-1, max}, {2}), ""},   // every 64-bit seed is valid
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(::testing::Message() << c.name << " = " << c.value.to_string());
    std::filesystem::copy_file(saved, path, std::filesystem::copy_options::overwrite_existing);
    rewrite(path, c.name, c.value);
    GptRun run(3, kCPU);
    run.step();
    const std::vector<std::vector<uint8_t>> before = run_bytes(run);
    const absl::Status st = load_checkpoint(path, run.model, run.state());
    if (c.message.empty()) {
      EXPECT_TRUE(st.ok()) << st;
      continue;
    }
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
    EXPECT_NE(st.message().find(path), absl::string_view::npos) << st;
    EXPECT_NE(st.message().find(c.message), absl::string_view::npos) << st;
    EXPECT_TRUE(run_bytes(run) == before);
    EXPECT_EQ(run.sched.current_step(), 1);
  }
}

// The reviewer's case: an AdamW step count of -1 loaded, the next step()
// divided by 1 - beta^0 = 0 and made every weight NaN. Refused, the run's
// next step is finite.
TEST(TrainingCheckpointTest, ANegativeAdamWStepCannotMakeTheNextStepNaN) {
  const std::string path = ::testing::TempDir() + "/negative_adamw_step.safetensors";
  TinyRun a(1);
  Tensor x = testing::random_tensor({4, 6}, 1);
  Tensor y = from_vector<int64_t>({0, 1, 2, 1});
  a.step(x, y);
  ASSERT_TRUE(save_checkpoint(path, a.model, a.opt.get()).ok());
  rewrite(path, "optim.step", from_vector<int64_t>({-1}, Shape{}));
  TinyRun b(2);
  EXPECT_EQ(load_checkpoint(path, b.model, b.opt.get()).code(), absl::StatusCode::kInvalidArgument);
  b.step(x, y);
  for (const Tensor& p : b.model.parameters()) {
    for (double v : testing::values(p)) ASSERT_TRUE(std::isfinite(v));
  }
}

// Checked scalars are read apart from the other tensors; LoadReport still
// lists conversions in the parts' order ("lr" first in the optimizer's).
TEST(TrainingCheckpointTest, ConversionsAreReportedInTheOrderOfTheParts) {
  const std::string path = ::testing::TempDir() + "/converted_order.safetensors";
  TinyRun a(1);
  a.step(testing::random_tensor({4, 6}, 1), from_vector<int64_t>({0, 1, 2, 1}));
  ASSERT_TRUE(save_checkpoint(path, a.model, a.opt.get()).ok());
  rewrite(path, "optim.lr", a.opt->lr().to(kFloat16));
  rewrite(path, "optim.exp_avg.0", a.opt->state()[2].second.to(kFloat16));
  ASSERT_EQ(a.opt->state()[2].first, "exp_avg.0");
  TinyRun b(2);
  LoadReport report;
  const absl::Status st = load_checkpoint(path, b.model, {.optimizer = b.opt.get(), .default_generators = false},
                                          {.convert_dtypes = true}, &report);
  ASSERT_TRUE(st.ok()) << st;
  EXPECT_EQ(report.converted, (std::vector<std::string>{"optim.lr: f16 -> f32", "optim.exp_avg.0: f16 -> f32"}));
  EXPECT_EQ(b.opt->get_lr(), static_cast<float>(static_cast<Half>(a.opt->get_lr())));
}

// BatchNorm's count of batches is a count like AdamW's step: with momentum
// nullopt the update factor is 1 / the count, so -1 (0 after the next
// increment) would make the running statistics inf. Refused, naming the
// tensor; nothing changes.
TEST(TrainingCheckpointTest, ANegativeBatchCountIsRefusedBeforeAnythingIsWritten) {
  const std::string path = ::testing::TempDir() + "/batch_count.safetensors";
  nn::BatchNorm1d saved(3, 1e-5, std::nullopt);
  (void)saved.forward(testing::random_tensor({4, 3}, 1));
  ASSERT_TRUE(save_checkpoint(path, saved).ok());
  for (int64_t count : {int64_t{-1}, std::numeric_limits<int64_t>::max()}) {
    SCOPED_TRACE(count);
    rewrite(path, "model.num_batches_tracked", from_vector<int64_t>({count}, Shape{}));
    nn::BatchNorm1d bn(3, 1e-5, std::nullopt);
    const absl::Status st = load_checkpoint(path, bn);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
    EXPECT_NE(st.message().find(absl::StrCat("\"model.num_batches_tracked\": is ", count)), absl::string_view::npos)
        << st;
    EXPECT_EQ(bn.num_batches_tracked.item<int64_t>(), 0);
    (void)bn.forward(testing::random_tensor({4, 3}, 2));
    for (double v : testing::values(bn.running_var)) EXPECT_TRUE(std::isfinite(v));
  }
  rewrite(path, "model.num_batches_tracked", from_vector<int64_t>({7}, Shape{}));
  nn::BatchNorm1d bn(3, 1e-5, std::nullopt);
  ASSERT_TRUE(load_checkpoint(path, bn).ok());
  EXPECT_EQ(bn.num_batches_tracked.item<int64_t>(), 7);
}

// A null generator pointer is a null part (training_checkpoint.h): a save
// writes no "rng.<name>", a load passes over the file's "rng.<name>" (not
// read, not refused, not reported) and restores the others.
TEST(TrainingCheckpointTest, NullGeneratorEntriesAreNeitherSavedNorLoaded) {
  const std::string path = ::testing::TempDir() + "/null_generator.safetensors";
  nn::Linear model(2, 2);
  Generator other(5);
  const TrainingState with_null{.generators = {{"data", nullptr}, {"other", &other}}, .default_generators = false};
  absl::Status st = save_checkpoint(path, model, with_null);
  ASSERT_TRUE(st.ok()) << st;
  absl::StatusOr<std::vector<std::pair<std::string, Shape>>> shapes = load_safetensors_shapes(path);
  ASSERT_TRUE(shapes.ok()) << shapes.status();
  for (const auto& [name, shape] : *shapes) EXPECT_NE(name, "rng.data");
  Generator data(1), other_saved(9);
  (void)rand({3}, kFloat32, kCPU, &other_saved);
  st = save_checkpoint(path, model,
                       {.generators = {{"data", &data}, {"other", &other_saved}}, .default_generators = false});
  ASSERT_TRUE(st.ok()) << st;
  LoadReport report;
  st = load_checkpoint(path, model, with_null, {}, &report);   // strict
  ASSERT_TRUE(st.ok()) << st;
  EXPECT_EQ(other.seed(), 9u);
  EXPECT_EQ(other.offset(), 3u);
  EXPECT_TRUE(report.unexpected.empty() && report.missing.empty());
  st = load_checkpoint(path, model, {.generators = {{"data", nullptr}}, .default_generators = false});
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;   // "rng.other" is still an extra tensor
  EXPECT_NE(st.message().find("\"rng.other\""), absl::string_view::npos) << st;
}

// A run saved where CUDA was (its default CUDA generator in the file)
// resumed on a machine without: the file's "rng.default.cuda:0" has nothing
// to go into and is passed over; the CPU generator is restored. It was
// refused as a tensor "in the file but not in" the run.
TEST(TrainingCheckpointTest, AGpuRunsCheckpointResumesWhereThereIsNoCuda) {
  if (cuda_available()) GTEST_SKIP() << "CUDA is available: the file's CUDA generator is restored";
  const std::string path = ::testing::TempDir() + "/gpu_made.safetensors";
  nn::Linear model(2, 2);
  Generator cpu_saved(7), cuda_saved(8);
  (void)rand({5}, kFloat32, kCPU, &cpu_saved);
  ASSERT_TRUE(save_checkpoint(path, model,
                              {.generators = {{"default.cpu", &cpu_saved}, {"default.cuda:0", &cuda_saved}},
                               .default_generators = false})
                  .ok());
  LoadReport report;
  const absl::Status st = load_checkpoint(path, model, TrainingState{}, {}, &report);   // strict, default generators
  ASSERT_TRUE(st.ok()) << st;
  EXPECT_EQ(default_generator(kCPU).seed(), 7u);
  EXPECT_EQ(default_generator(kCPU).offset(), 5u);
  EXPECT_TRUE(report.unexpected.empty() && report.missing.empty());
  // Saved without CUDA, the file has no CUDA generator at all.
  ASSERT_TRUE(save_checkpoint(path, model, TrainingState{}).ok());
  absl::StatusOr<std::vector<std::pair<std::string, Shape>>> shapes = load_safetensors_shapes(path);
  ASSERT_TRUE(shapes.ok()) << shapes.status();
  for (const auto& [name, shape] : *shapes) EXPECT_NE(name, "rng.default.cuda:0");
}

// NOTE [ Optimizer state by parameter ]: an optimizer rebuilt over the same
// parameters in another order, each position the same shape, loaded the
// moments of another parameter without a word.
TEST(TrainingCheckpointTest, AnOptimizerOverReorderedParametersIsRefused) {
  const std::string path = ::testing::TempDir() + "/reordered.safetensors";
  manual_seed(4);
  nn::Sequential model(std::make_unique<nn::Linear>(4, 4), std::make_unique<nn::Linear>(4, 4));
  optim::AdamW opt(model.parameters(), {.lr = 1e-2});
  opt.zero_grad();
  sum(model.forward(ones({2, 4}))).backward();
  opt.step();
  ASSERT_TRUE(save_checkpoint(path, model, TrainingState{.optimizer = &opt}).ok());
  const std::vector<Tensor> p = model.parameters();   // 0.weight, 0.bias, 1.weight, 1.bias
  optim::AdamW reordered({p[2], p[3], p[0], p[1]}, {.lr = 1e-2});
  reordered.init_state();
  const NamedTensors before = reordered.state();
  std::vector<std::vector<double>> kept;
  for (const auto& [name, t] : before) kept.push_back(testing::values(t));
  const absl::Status st = load_checkpoint(path, model, TrainingState{.optimizer = &reordered});
  testing::expect_status(st, absl::StatusCode::kInvalidArgument,
                         {"the optimizer's parameter 0 is the model's \"1.weight\" here but was \"0.weight\"",
                          "build the optimizer over the parameters in the order the saved run did"});
  for (size_t i = 0; i < before.size(); ++i) {
    EXPECT_EQ(testing::values(before[i].second), kept[i]) << before[i].first << " changed by a refused load";
  }
  optim::AdamW same(model.parameters(), {.lr = 1e-2});
  EXPECT_TRUE(load_checkpoint(path, model, TrainingState{.optimizer = &same}).ok());
}

// NOTE [ One file per load ]: a load opens its file once and parses its
// header once (seen by inotify), so a save that renames another file over
// the path during the load cannot give it one file's metadata and names and
// another's tensors.
TEST(TrainingCheckpointTest, ALoadOpensItsFileOnce) {
  const std::string path = ::testing::TempDir() + "/opened_once.safetensors";
  {
    GptRun saved(1, kCPU);
    saved.step();
    ASSERT_TRUE(save_checkpoint(path, saved.model, saved.state()).ok());
  }
  GptRun run(3, kCPU);
  absl::Status st;
  EXPECT_EQ(testing::opens_of(path, [&] { st = load_checkpoint(path, run.model, run.state()); }), 1);
  EXPECT_TRUE(st.ok()) << st;
  EXPECT_EQ(run.sched.current_step(), 1);
}

// Two checkpoints of one run, at steps 1 and 4, saved over one path again
// and again while another thread loads it: every load succeeds and restores
// one of them whole (its schedule step with its parameters), never the step
// of one file with the parameters of the other.
TEST(TrainingCheckpointTest, ALoadDuringSavesRestoresOneWholeFile) {
  const std::string path = ::testing::TempDir() + "/saved_during_loads.safetensors";
  const std::string early = path + ".early", late = path + ".late";
  std::map<int64_t, std::vector<std::vector<float>>> params_at;   // schedule step -> parameters
  {
    GptRun run(1, kCPU);
    run.step();
    ASSERT_TRUE(save_checkpoint(early, run.model, run.state()).ok());
    params_at[1] = parameter_values(run.model);
    for (int i = 0; i < 3; ++i) run.step();
    ASSERT_TRUE(save_checkpoint(late, run.model, run.state()).ok());
    params_at[4] = parameter_values(run.model);
  }
  absl::StatusOr<NamedTensors> files[2] = {load_safetensors(early), load_safetensors(late)};
  absl::StatusOr<std::map<std::string, std::string>> metadata = load_safetensors_metadata(early);
  ASSERT_TRUE(files[0].ok() && files[1].ok() && metadata.ok());
  ASSERT_TRUE(save_safetensors(path, *files[0], *metadata).ok());
  std::atomic<bool> done{false};
  std::thread saver([&] {
    for (int i = 0; !done.load(); ++i) (void)save_safetensors(path, *files[i % 2], *metadata);
  });
  int mixed = 0, failed = 0;
  for (int i = 0; i < 200; ++i) {
    GptRun run(3, kCPU);
    const absl::Status st = load_checkpoint(path, run.model, run.state());
    if (!st.ok()) {
      ++failed;
      ADD_FAILURE() << st;
      continue;
    }
    auto it = params_at.find(run.sched.current_step());
    if (it == params_at.end() || parameter_values(run.model) != it->second) ++mixed;
  }
  done = true;
  saver.join();
  EXPECT_EQ(failed, 0);
  EXPECT_EQ(mixed, 0) << "loads that restored one file's step with the other file's parameters";
}

// A named part's prefix in the file holding a tensor the run does not have
// is refused (strict), naming the file and the tensor, and nothing changes.
TEST(TrainingCheckpointTest, TensorsTheRunDoesNotHaveAreRefusedBeforeAnythingIsWritten) {
  const std::string path = ::testing::TempDir() + "/extra_parts.safetensors";
  {
    GptRun saved(1, kCPU);
    saved.step();
    ASSERT_TRUE(save_checkpoint(path, saved.model, saved.state()).ok());   // has "rng.data"
  }
  GptRun run(3, kCPU);
  run.step();
  const std::vector<std::vector<uint8_t>> before = run_bytes(run);
  TrainingState without_data{.optimizer = &run.opt, .schedule = &run.sched};
  absl::Status st = load_checkpoint(path, run.model, without_data);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_NE(st.message().find(path), absl::string_view::npos) << st;
  EXPECT_NE(st.message().find("\"rng.data\": in the file but not in the model, optimizer, schedule or generators"),
            absl::string_view::npos) << st;
  EXPECT_TRUE(run_bytes(run) == before);
  LoadReport report;
  ASSERT_TRUE(load_checkpoint(path, run.model, without_data, {.strict = false}, &report).ok());
  EXPECT_EQ(report.unexpected, std::vector<std::string>{"rng.data"});
}

}  // namespace
}  // namespace encore
