// Capture against eager on random training steps. A seeded generator writes a
// small training program: a chain of ops drawn from every family encore has
// (elementwise, broadcasting, GEMMs with transposed operands, views, slices,
// joins and splits, reductions, normalisation, dropout and randn inside the
// step, bf16/f16 round trips, masks, embeddings, persistent state updated in
// place), a loss over every value no later op consumed, backward, optional
// gradient clipping and an SGD or AdamW update; a quarter of the programs keep
// parameters, inputs and values in bf16. Each program is trained
// eagerly, then again from the same seed captured and replayed; every replay
// must equal its eager step bit for bit (loss, last value, parameters and
// persistent state). The smooth programs' gradients are also checked against
// finite differences. The hand-written models of capture_test.cpp cover a few
// layouts; these cover the combinations nobody wrote by hand (a transposed
// view feeding a GEMM's backward, an in-place update read later in the step,
// a split piece that is a view of an arena buffer, ...).
//
// A failure names the seed and prints the program:
//   build/tests/capture/random_program_test --gtest_filter='*/17'
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "encore/capture.h"
#include "encore/encore.h"
#include "encore/optim.h"
#include "tests/backends/cuda_test_util.h"
#include "tests/test_util.h"

namespace encore {
namespace {

constexpr int64_t kRows = 6;     // every value is [kRows, width]
constexpr int64_t kInWidth = 5;  // value 0: the static input x
constexpr int64_t kClasses = 3;  // labels y in [0, kClasses); every width is >= kClasses
constexpr int64_t kVocab = 4;    // embedding ids in [0, kVocab)
constexpr int64_t kMaxWidth = 12;
constexpr int kSteps = 10;
constexpr int kSeeds = 64;

// What a step closes over: parameters, persistent state, static inputs and
// the optimizer. Held by unique_ptr: the step's closure keeps its address.
struct Rig {
  Device dev;
  std::vector<Tensor> params;
  std::vector<Tensor> buffers;   // persistent state updated in place by the step, no grad
  std::vector<Tensor> masks;     // bool [kRows, w] per program mask
  Tensor x, y, ids;              // static inputs, refilled before every step
  std::unique_ptr<optim::Optimizer> opt;
};

using Values = std::vector<Tensor>;
struct Instr {
  std::string text;                              // for the failure message
  std::function<Tensor(const Values&, Rig&)> run;
};

struct ParamSpec {
  Shape shape;
  double scale;
};

struct Program {
  std::vector<Instr> ops;
  std::vector<int64_t> widths;             // widths[v]: value v is [kRows, widths[v]]
  std::vector<ParamSpec> params;
  std::vector<int64_t> buffer_widths;      // persistent state [1, w]
  std::vector<int64_t> mask_widths;
  std::vector<std::pair<int, double>> loss_terms;   // c * mean(tanh(v * v)) for c > 0, else c * mean(v)
  bool cross_entropy_on_last = false;
  DType dtype = kFloat32;                  // of parameters, x, state and every value
  bool adamw = true;
  bool nesterov = false;
  bool clip = false;

  std::string describe() const {
    std::string s;
    for (size_t i = 0; i < ops.size(); ++i) {
      s += "  v" + std::to_string(i + 1) + " [" + std::to_string(widths[i + 1]) + "] = " + ops[i].text + "\n";
    }
    s += "  dtype " + std::string(dtype_name(dtype)) + ", loss over";
    for (const auto& [v, c] : loss_terms) s += " v" + std::to_string(v);
    s += cross_entropy_on_last ? " + cross_entropy(last)" : "";
    s += adamw ? ", AdamW" : (nesterov ? ", SGD nesterov" : ", SGD momentum");
    s += clip ? ", clip_grad_norm\n" : "\n";
    return s;
  }
};

// Bounded unary functions, so that ten steps of training stay finite.
struct Unary {
  const char* name;
  Tensor (*fn)(const Tensor&);
  bool smooth = true;   // differentiable everywhere (finite differences hold)
};
const Unary kUnary[] = {
    {"tanh", [](const Tensor& a) { return tanh(a); }},
    {"sigmoid", [](const Tensor& a) { return sigmoid(a); }},
    {"relu", [](const Tensor& a) { return relu(a); }, false},
    {"gelu", [](const Tensor& a) { return gelu(a); }},
    {"gelu_erf", [](const Tensor& a) { return gelu(a, GeluApprox::kNone); }},
    {"silu", [](const Tensor& a) { return silu(a); }},
    {"neg", [](const Tensor& a) { return neg(a); }},
    {"abs", [](const Tensor& a) { return abs(a); }, false},
    {"exp(tanh)", [](const Tensor& a) { return exp(tanh(a)); }},
    {"log(sigmoid+0.5)", [](const Tensor& a) { return log(sigmoid(a) + 0.5); }},
    {"sqrt(abs+1)", [](const Tensor& a) { return sqrt(abs(a) + 1.0); }, false},
    {"rsqrt(abs+1)", [](const Tensor& a) { return rsqrt(abs(a) + 1.0); }, false},
    {"pow(tanh,3)", [](const Tensor& a) { return pow(tanh(a), 3.0); }},
    {"clamp(-1,1)", [](const Tensor& a) { return clamp(a, -1.0, 1.0); }, false},
    {"2-a", [](const Tensor& a) { return 2.0 - a; }},
    {"1/(abs+1)", [](const Tensor& a) { return 1.0 / (abs(a) + 1.0); }, false},
};

class ProgramWriter {
 public:
  // smooth: only ops differentiable everywhere and deterministic (no
  // dropout, randn, low-precision round trips, state updated in place or
  // values detached), so that finite differences check the gradients.
  explicit ProgramWriter(uint64_t seed, bool smooth = false) : g_(seed), smooth_(smooth) {}

  Program make() {
    p_.widths = {kInWidth};
    p_.dtype = pick(4) == 0 && !smooth_ ? kBFloat16 : kFloat32;
    p_.adamw = pick(2) == 0;
    p_.nesterov = pick(2) == 0;
    p_.clip = pick(3) == 0;
    const int n = 5 + pick(12);
    for (int i = 0; i < n; ++i) {
      int kind = kLinear;   // first: a parameter always
      while (i > 0 && (kind = pick(kKinds)) >= kFirstRough && smooth_) {}
      emit_one(kind);
    }
    std::vector<bool> used(p_.widths.size(), false);
    for (int v : consumed_) used[v] = true;
    used[1] = false;   // v1, the first Linear, always counts: the loss needs a gradient
    for (size_t v = 1; v < p_.widths.size(); ++v) {
      if (!used[v]) p_.loss_terms.push_back({static_cast<int>(v), (pick(2) ? 1.0 : -0.5) * (1 + pick(3))});
    }
    p_.cross_entropy_on_last = pick(2) == 0;
    return std::move(p_);
  }

 private:
  int pick(int n) { return static_cast<int>(g_() % static_cast<uint64_t>(n)); }
  int64_t pick_width() { const int64_t w[] = {3, 4, 5, 8}; return w[pick(4)]; }

  // An operand: usually one of the last three values, else any.
  int operand() {
    const int n = static_cast<int>(p_.widths.size());
    const int v = pick(2) ? n - 1 - pick(std::min(n, 3)) : pick(n);
    consumed_.push_back(v);
    return v;
  }
  // A value of width w; callers pass their first operand's width, so there
  // is always one (that operand itself, used twice).
  int operand_of_width(int64_t w) {
    std::vector<int> c;
    for (size_t v = 0; v < p_.widths.size(); ++v) if (p_.widths[v] == w) c.push_back(static_cast<int>(v));
    const int v = c[pick(static_cast<int>(c.size()))];
    consumed_.push_back(v);
    return v;
  }
  int param(Shape shape, double scale) {
    p_.params.push_back({std::move(shape), scale});
    return static_cast<int>(p_.params.size()) - 1;
  }
  static std::string v(int i) { return "v" + std::to_string(i); }
  void emit(std::string text, int64_t width, std::function<Tensor(const Values&, Rig&)> run) {
    p_.ops.push_back({std::move(text), std::move(run)});
    p_.widths.push_back(width);
  }

  static constexpr int kKinds = 17, kLinear = 4, kFirstRough = 10;   // kinds >= kFirstRough are not smooth
  void emit_one(int kind) {
    const int a = operand();
    const int64_t wa = p_.widths[a];
    switch (kind) {
      case 0: {
        const Unary* u = &kUnary[pick(static_cast<int>(std::size(kUnary)))];
        while (smooth_ && !u->smooth) u = &kUnary[pick(static_cast<int>(std::size(kUnary)))];
        emit(std::string(u->name) + "(" + v(a) + ")", wa, [a, fn = u->fn](const Values& x, Rig&) { return fn(x[a]); });
        return;
      }
      case 1: {   // same-shape binary
        const int b = operand_of_width(wa);
        const int op = pick(4);
        const std::string texts[] = {v(a) + " + " + v(b), v(a) + " - " + v(b), "tanh(" + v(a) + ") * " + v(b),
                                     v(a) + " / (" + v(b) + "^2 + 1)"};
        emit(texts[op], wa, [a, b, op](const Values& x, Rig&) {
          switch (op) {
            case 0: return x[a] + x[b];
            case 1: return x[a] - x[b];
            case 2: return tanh(x[a]) * x[b];
            default: return x[a] / (x[b] * x[b] + 1.0);
          }
        });
        return;
      }
      case 2: {   // broadcast a row: a reduced value or a bias parameter
        if (pick(2)) {
          const int b = operand_of_width(wa);
          emit(v(a) + " * tanh(mean(" + v(b) + ", 0, keepdim))", wa, [a, b](const Values& x, Rig&) {
            return x[a] * tanh(mean(x[b], {0}, true));
          });
        } else {
          const int k = param({wa}, 0.5);
          emit(v(a) + " + p" + std::to_string(k) + "[" + std::to_string(wa) + "]", wa,
               [a, k](const Values& x, Rig& r) { return x[a] + r.params[k]; });
        }
        return;
      }
      case 3: {   // broadcast a column onto any value
        const int b = operand();
        emit("tanh(sum(" + v(a) + ", 1, keepdim)) * " + v(b), p_.widths[b], [a, b](const Values& x, Rig&) {
          return tanh(sum(x[a], {1}, true)) * x[b];
        });
        return;
      }
      case 4: {   // Linear, with or without a bias
        const int64_t w = pick_width();
        const int k = param({w, wa}, 1.0 / std::sqrt(static_cast<double>(wa)));
        const int kb = pick(2) ? param({w}, 0.1) : -1;
        emit("linear(" + v(a) + ", p" + std::to_string(k) + (kb >= 0 ? ", bias" : "") + ")", w,
             [a, k, kb](const Values& x, Rig& r) { return linear(x[a], r.params[k], kb >= 0 ? r.params[kb] : Tensor()); });
        return;
      }
      case 5: {   // matmul with a [wa, w] parameter, 2-D or batched 3-D
        const int64_t w = pick_width();
        const int k = param({wa, w}, 1.0 / std::sqrt(static_cast<double>(wa)));
        if (pick(2)) {
          emit(v(a) + " @ p" + std::to_string(k), w, [a, k](const Values& x, Rig& r) { return matmul(x[a], r.params[k]); });
        } else {
          emit("(" + v(a) + ".reshape(2,3," + std::to_string(wa) + ") @ p" + std::to_string(k) + ").reshape", w,
               [a, k, wa](const Values& x, Rig& r) {
                 return matmul(x[a].reshape({2, kRows / 2, wa}), r.params[k]).reshape({kRows, -1});
               });
        }
        return;
      }
      case 6: {   // GEMMs with transposed operands: a @ (a^T b) / rows
        const int b = operand();
        emit("tanh(" + v(a) + ") @ (tanh(" + v(a) + ").t() @ " + v(b) + ") / 6", p_.widths[b], [a, b](const Values& x, Rig&) {
          Tensor t = tanh(x[a]);
          return matmul(t, matmul(t.t(), x[b])) * (1.0 / kRows);
        });
        return;
      }
      case 7: {   // views
        const int kind = pick(5);
        if (kind == 0) {
          emit("tanh(" + v(a) + ".t()).t()", wa, [a](const Values& x, Rig&) { return tanh(x[a].t()).t(); });
        } else if (kind == 1 && wa >= 6) {
          const int64_t w = (wa + 1) / 2;
          emit(v(a) + ".slice(1, 0, end, 2)", w, [a, wa](const Values& x, Rig&) { return x[a].slice(1, 0, wa, 2); });
        } else if (kind == 2) {
          emit(v(a) + ".unsqueeze(0).expand(2,..).sum(0)", wa, [a, wa](const Values& x, Rig&) {
            return sum(x[a].unsqueeze(0).expand({2, kRows, wa}), {0});
          });
        } else if (kind == 3) {
          emit(v(a) + ".reshape(6,w,1).permute(2,0,1).select(0,0) * 1.5", wa, [a, wa](const Values& x, Rig&) {
            return x[a].reshape({kRows, wa, 1}).permute({2, 0, 1}).select(0, 0) * 1.5;
          });
        } else {
          emit(v(a) + ".slice(0, 1, 6).contiguous() rows padded by concat", wa, [a](const Values& x, Rig&) {
            return concat({x[a].slice(0, 1, kRows).contiguous(), x[a].slice(0, 0, 1)}, 0);
          });
        }
        return;
      }
      case 8: {   // joins and splits
        const int b = operand();
        const int64_t wb = p_.widths[b];
        if (wa + wb <= kMaxWidth && pick(2)) {
          emit("concat(" + v(a) + ", " + v(b) + ", 1)", wa + wb,
               [a, b](const Values& x, Rig&) { return concat({x[a], x[b]}, 1); });
        } else if (wa >= 6) {
          consumed_.pop_back();   // b is not used after all
          const int piece = pick(static_cast<int>(wa / 3));
          emit("split(" + v(a) + ", 3, 1)[" + std::to_string(piece) + "]", 3,
               [a, piece](const Values& x, Rig&) { return split(x[a], 3, 1)[piece]; });
        } else if (wb == wa) {
          emit("stack(" + v(a) + ", " + v(b) + ", 1).sum(1)", wa,
               [a, b](const Values& x, Rig&) { return sum(stack({x[a], x[b]}, 1), {1}); });
        } else {
          consumed_.pop_back();   // b is not used after all
          emit(v(a) + ".clone()", wa, [a](const Values& x, Rig&) { return x[a].clone(); });
        }
        return;
      }
      case 9: {   // normalisation along the last dim
        const int kind = pick(smooth_ ? 4 : 5);   // max is not smooth
        if (kind == 0) {
          emit("softmax(" + v(a) + ", 1)", wa, [a](const Values& x, Rig&) { return softmax(x[a], 1); });
        } else if (kind == 1) {
          emit("log_softmax(" + v(a) + ", 1) * 0.2", wa, [a](const Values& x, Rig&) { return log_softmax(x[a], 1) * 0.2; });
        } else if (kind == 2) {
          const int kw = param({wa}, 1.0), kb = param({wa}, 0.1);
          emit("layer_norm(" + v(a) + ", w, b)", wa, [a, wa, kw, kb](const Values& x, Rig& r) {
            return layer_norm(x[a], {wa}, r.params[kw], r.params[kb]);
          });
        } else if (kind == 3) {
          emit("(" + v(a) + " - mean) * rsqrt(var + 1)", wa, [a](const Values& x, Rig&) {
            return (x[a] - mean(x[a], {1}, true)) * rsqrt(var(x[a], {1}, 1, true) + 1.0);
          });
        } else {
          emit(v(a) + " * tanh(max(" + v(a) + "))", wa, [a](const Values& x, Rig&) { return x[a] * tanh(max(x[a])); });
        }
        return;
      }
      case 10:
        emit("dropout(" + v(a) + ", 0.25)", wa, [a](const Values& x, Rig&) { return dropout(x[a], 0.25); });
        return;
      case 11: {   // a low-precision round trip
        const DType dt = pick(2) ? kBFloat16 : kFloat16;
        emit("tanh(h * h + h) back in the model's dtype, h = " + v(a) + ".to(" + std::string(dtype_name(dt)) + ")", wa,
             [a, dt](const Values& x, Rig&) {
          Tensor h = x[a].to(dt);
          return tanh(h * h + h).to(x[a].dtype());
        });
        return;
      }
      case 12: {   // masks
        p_.mask_widths.push_back(wa);
        const int m = static_cast<int>(p_.mask_widths.size()) - 1;
        if (pick(2)) {
          const int b = operand_of_width(wa);
          emit("where(mask, " + v(a) + ", " + v(b) + ")", wa,
               [a, b, m](const Values& x, Rig& r) { return where(r.masks[m], x[a], x[b]); });
        } else {
          emit("masked_fill(" + v(a) + ", mask, 0.5)", wa,
               [a, m](const Values& x, Rig& r) { return masked_fill(x[a], r.masks[m], 0.5); });
        }
        return;
      }
      case 13: {   // an embedding table indexed by the static ids
        const int k = param({kVocab, wa}, 1.0);
        emit(v(a) + " + embedding(p" + std::to_string(k) + ", ids)", wa,
             [a, k](const Values& x, Rig& r) { return x[a] + embedding(r.params[k], r.ids); });
        return;
      }
      case 14:   // noise drawn inside the step
        emit(v(a) + " + 0.1 * randn + 0.1 * rand", wa, [a, wa](const Values& x, Rig& r) {
          const DType dt = x[a].dtype();
          return x[a] + randn({kRows, wa}, dt, r.dev) * 0.1 + rand({kRows, wa}, dt, r.dev) * 0.1;
        });
        return;
      case 15: {   // persistent state updated in place, then read (a running mean)
        p_.buffer_widths.push_back(wa);
        const int k = static_cast<int>(p_.buffer_widths.size()) - 1;
        emit(v(a) + " + running_mean(" + v(a) + ")", wa, [a, k](const Values& x, Rig& r) {
          Tensor& buf = r.buffers[k];
          {
            NoGradGuard no_grad;
            buf.mul_(0.9);
            buf.add_(mean(x[a].detach(), {0}, true), 0.1);
          }
          return x[a] + buf;
        });
        return;
      }
      default: {   // in-place on a fresh (non-leaf-free) temporary
        emit(v(a) + " * 0.5 then add_(" + v(a) + ".detach())", wa, [a](const Values& x, Rig&) {
          Tensor t = x[a] * 0.5;
          NoGradGuard no_grad;
          Tensor d = x[a].detach().clone();
          d.add_(t.detach(), 2.0);
          return x[a] * d;
        });
        return;
      }
    }
  }

  std::mt19937_64 g_;
  bool smooth_;
  Program p_;
  std::vector<int> consumed_;
};

// Parameters, state and inputs of a program on dev, from fixed seeds (the
// same values on every device).
std::unique_ptr<Rig> make_rig(const Program& p, Device dev, uint64_t seed) {
  auto rig = std::make_unique<Rig>();
  Rig& r = *rig;
  r.dev = dev;
  manual_seed(seed);
  for (size_t i = 0; i < p.params.size(); ++i) {
    Tensor t = (testing::random_tensor(p.params[i].shape, seed * 1000 + i) * p.params[i].scale).to(p.dtype).to(dev);
    t.requires_grad_();
    r.params.push_back(t);
  }
  for (int64_t w : p.buffer_widths) r.buffers.push_back(zeros({1, w}, p.dtype, dev));
  for (size_t i = 0; i < p.mask_widths.size(); ++i) {
    std::vector<bool> m;
    for (double x : testing::values(testing::random_tensor({kRows, p.mask_widths[i]}, seed * 1000 + 500 + i))) {
      m.push_back(x > 0);
    }
    r.masks.push_back(from_vector<bool>(m, {kRows, p.mask_widths[i]}, dev));
  }
  r.x = zeros({kRows, kInWidth}, p.dtype, dev);
  r.y = zeros({kRows}, kInt64, dev);
  r.ids = zeros({kRows}, kInt64, dev);
  if (p.adamw) {
    r.opt = std::make_unique<optim::AdamW>(r.params, optim::AdamWOptions{.lr = 1e-2, .weight_decay = 0.05});
  } else {
    r.opt = std::make_unique<optim::SGD>(
        r.params, optim::SgdOptions{.lr = 2e-2, .momentum = 0.9, .nesterov = p.nesterov, .weight_decay = 0.01});
  }
  return rig;
}

void fill(Rig& r, int step) {
  std::vector<int64_t> y(kRows), ids(kRows);
  for (int64_t i = 0; i < kRows; ++i) {
    y[i] = (step * 5 + i * 2) % kClasses;
    ids[i] = (step + i * 3) % kVocab;
  }
  NoGradGuard no_grad;
  r.x.copy_(testing::random_tensor({kRows, kInWidth}, 7000 + step));
  r.y.copy_(from_vector<int64_t>(y));
  r.ids.copy_(from_vector<int64_t>(ids));
}

// The forward pass: {loss, last value}.
std::vector<Tensor> forward(const Program& p, Rig& r) {
  Values v{r.x};
  for (const Instr& op : p.ops) v.push_back(op.run(v, r));
  Tensor loss = zeros({}, kFloat32, r.dev);
  for (const auto& [i, c] : p.loss_terms) {
    loss = loss + (c > 0 ? mean(tanh(v[i] * v[i])) : mean(v[i])).to(kFloat32) * c;
  }
  if (p.cross_entropy_on_last) loss = loss + cross_entropy(v.back(), r.y).to(kFloat32);
  return {loss, v.back()};
}

// zero_grad, forward and backward: {loss, last value}.
std::vector<Tensor> forward_backward(const Program& p, Rig& r) {
  r.opt->zero_grad();
  std::vector<Tensor> out = forward(p, r);
  out[0].backward();
  return out;
}

// One training step of the program: {loss, last value}.
std::vector<Tensor> run_step(const Program& p, Rig& r) {
  std::vector<Tensor> out = forward_backward(p, r);
  if (p.clip) optim::clip_grad_norm(r.params, 0.5);
  r.opt->step();
  return out;
}

// Bits of everything a step changes: the outputs, parameters and state.
std::vector<std::vector<float>> observe(const Rig& r, const std::vector<Tensor>& outputs) {
  std::vector<std::vector<float>> out;
  // bf16 -> f32 is exact, so comparing the f32 bits compares the bf16 bits.
  for (const Tensor& t : outputs) out.push_back(t.to(kFloat32).to_vector<float>());
  for (const Tensor& t : r.params) out.push_back(t.to(kFloat32).to_vector<float>());
  for (const Tensor& t : r.buffers) out.push_back(t.to(kFloat32).to_vector<float>());
  return out;
}

std::string first_difference(const std::vector<std::vector<float>>& a, const std::vector<std::vector<float>>& b) {
  const char* what = "output";
  for (size_t i = 0; i < a.size(); ++i) {
    if (i == 2) what = "parameter/buffer";
    if (a[i].size() != b[i].size()) return std::string(what) + " " + std::to_string(i) + ": sizes differ";
    for (size_t j = 0; j < a[i].size(); ++j) {
      if (std::memcmp(&a[i][j], &b[i][j], sizeof(float)) != 0) {
        return std::string(what) + " " + std::to_string(i) + " element " + std::to_string(j) + ": replay " +
               std::to_string(a[i][j]) + " eager " + std::to_string(b[i][j]);
      }
    }
  }
  return "";
}

// Eager reference (two steps on batch 0, as capture()'s warm-up runs, then
// kSteps), then the captured run from the same seed; every replay must equal
// its eager step bit for bit.
void expect_replays_match_eager(uint64_t seed, Device dev) {
  const Program p = ProgramWriter(seed).make();
  SCOPED_TRACE("seed " + std::to_string(seed) + ", program:\n" + p.describe());
  std::vector<std::vector<std::vector<float>>> eager;
  {
    std::unique_ptr<Rig> r = make_rig(p, dev, seed);
    fill(*r, 0);
    run_step(p, *r);
    run_step(p, *r);
    for (int i = 1; i <= kSteps; ++i) {
      fill(*r, i);
      eager.push_back(observe(*r, run_step(p, *r)));
    }
    const float last_loss = eager.back()[0][0];
    ASSERT_TRUE(std::isfinite(last_loss)) << "the program diverged: the test would compare NaNs";
  }
  std::unique_ptr<Rig> r = make_rig(p, dev, seed);
  fill(*r, 0);
  absl::StatusOr<Graph> graph = capture([&] { return run_step(p, *r); });
  ASSERT_TRUE(graph.ok()) << graph.status();
  for (int i = 1; i <= kSteps; ++i) {
    fill(*r, i);
    ASSERT_TRUE(graph->replay().ok()) << "step " << i;
    const std::string diff = first_difference(observe(*r, {graph->output(0), graph->output(1)}), eager[i - 1]);
    ASSERT_EQ(diff, "") << "step " << i;
  }
}

class RandomProgramTest : public ::testing::TestWithParam<int> {};

TEST_P(RandomProgramTest, ReplaysEqualEagerStepsBitForBit) { expect_replays_match_eager(GetParam(), kCPU); }

// The same programs on the GPU: CUDA graph replays against CUDA eager steps.
TEST_P(RandomProgramTest, CudaReplaysEqualEagerStepsBitForBit) {
  ENCORE_SKIP_WITHOUT_GPU();
  expect_replays_match_eager(GetParam(), Device::cuda(0));
}

// The CUDA kernels against the CPU ones on whole programs: one forward and
// backward from the same parameters, inputs and Philox draws, in f32. Tolerances: the
// programs round through bf16/f16 (one storage rounding step, 2^-8, may fall
// differently when the f32 values before it differ in the last bit, NOTE [ CUDA
// tolerances ]), so the loss is compared to 1e-3 and the gradients to 2e-2
// relative (atol 2e-3).
TEST_P(RandomProgramTest, CudaGradientsMatchCpu) {
  ENCORE_SKIP_WITHOUT_GPU();
  Program p = ProgramWriter(GetParam()).make();
  p.dtype = kFloat32;   // a bf16 program would round at every op, where CPU and CUDA may differ by a bf16 step
  SCOPED_TRACE("seed " + std::to_string(GetParam()) + ", program:\n" + p.describe());
  std::unique_ptr<Rig> cpu = make_rig(p, kCPU, GetParam());
  std::unique_ptr<Rig> gpu = make_rig(p, Device::cuda(0), GetParam());
  fill(*cpu, 1);
  fill(*gpu, 1);
  const Tensor loss_cpu = forward_backward(p, *cpu)[0];
  const Tensor loss_gpu = forward_backward(p, *gpu)[0];
  testing::expect_near(loss_gpu.to(kCPU), loss_cpu, 1e-4, 1e-3);
  for (size_t i = 0; i < p.params.size(); ++i) {
    SCOPED_TRACE("gradient of parameter " + std::to_string(i));
    const Tensor g_cpu = cpu->params[i].grad(), g_gpu = gpu->params[i].grad();
    ASSERT_EQ(g_cpu.defined(), g_gpu.defined());
    if (g_cpu.defined()) testing::expect_near(g_gpu.to(kCPU), g_cpu, 2e-3, 2e-2);
  }
}

// Backward of whole programs against central finite differences of their
// loss (smooth programs, f32; tolerances of testing::expect_gradients_match).
// Each op's backward has its own check in tests/ops; this one checks the
// compositions: gradients accumulated over values used twice, through views
// of views, broadcasts summed back, transposed GEMM operands. Step 1e-3, not
// the default 1e-2: deep compositions curve sharply (a layer_norm of rows with
// little variance), and at 4e-3 two of 1500 programs exceeded the tolerance by
// truncation error alone (the difference shrank with the step); at 1e-3 all
// 1500 pass, with f32 rounding still well inside atol.
TEST_P(RandomProgramTest, GradientsMatchFiniteDifferences) {
  const Program p = ProgramWriter(GetParam(), /*smooth=*/true).make();
  SCOPED_TRACE("seed " + std::to_string(GetParam()) + ", program:\n" + p.describe());
  std::unique_ptr<Rig> r = make_rig(p, kCPU, GetParam());
  fill(*r, 1);
  testing::expect_gradients_match(
      [&](const std::vector<Tensor>& params) {
        r->params = params;
        return forward(p, *r)[0];
      },
      r->params, /*eps=*/1e-3);
}

INSTANTIATE_TEST_SUITE_P(Seeds, RandomProgramTest, ::testing::Range(0, kSeeds));

// The generator reaches every op family: a change that shrinks its reach
// (a case that always falls through to its fallback) shows up here.
TEST(RandomProgramGeneratorTest, ProgramsUseEveryFamily) {
  std::vector<std::string> seen;
  int bf16 = 0, adamw = 0, clip = 0;
  for (int s = 0; s < kSeeds; ++s) {
    const Program p = ProgramWriter(s).make();
    for (const Instr& op : p.ops) seen.push_back(op.text);
    bf16 += p.dtype == kBFloat16;
    adamw += p.adamw;
    clip += p.clip;
  }
  for (int n : {bf16, adamw, clip}) {
    EXPECT_GT(n, 0);
    EXPECT_LT(n, kSeeds);
  }
  auto any = [&](const char* part) {
    for (const std::string& t : seen) if (t.find(part) != std::string::npos) return true;
    return false;
  };
  for (const char* part : {"linear(", "@ p", ".reshape(2,3,", ").t() @", ".t()).t()", ".slice(1,", "expand",
                           "permute", "concat(", "split(", "stack(", "softmax", "log_softmax", "layer_norm",
                           "rsqrt(var", "max(", "dropout", "to(bf16)", "to(f16)", "where(", "masked_fill",
                           "embedding", "randn", "running_mean", "add_(", "mean(", "sum("}) {
    EXPECT_TRUE(any(part)) << part;
  }
}

}  // namespace
}  // namespace encore
