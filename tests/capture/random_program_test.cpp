// Capture against eager on random training steps. A seeded generator writes a
// small training program: a chain of ops drawn from every family encore has
// (elementwise, broadcasting, GEMMs with transposed operands, views, slices,
// joins and splits, reductions, normalisation, dropout and randn inside the
// step, convolution, pooling and batch norm (its running statistics updated
// in place), bf16/f16 round trips, masks, embeddings, persistent state updated in
// place, the losses mse/bce-with-logits/nll, gather, index_select,
// scatter_add and topk), a loss over every value no later op consumed, backward, optional
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
#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
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
  std::string tag;                               // the generator's branch ("matmul", "unary/tanh", ...)
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
  // c * mean(tanh(v * v)) for c > 0, else c * mean of v's first column (a
  // whole row's mean would be constant after softmax or normalisation).
  std::vector<std::pair<int, double>> loss_terms;
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
    {"gelu", [](const Tensor& a) { return gelu(a, GeluApprox::kTanh); }},
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
  // kAny: every op family, a quarter of the programs in bf16. kF32: f32 and
  // no bf16/f16 round trips (CPU and CUDA then agree to f32 rounding). kSmooth:
  // f32, only ops differentiable everywhere and deterministic (no relu/abs/
  // clamp/max, dropout, randn, round trips, state updated in place or values
  // detached), so that finite differences check the gradients.
  enum class Mode { kAny, kF32, kSmooth };
  explicit ProgramWriter(uint64_t seed, Mode mode = Mode::kAny)
      : g_(seed), smooth_(mode == Mode::kSmooth), f32_(mode != Mode::kAny) {}

  Program make() {
    p_.widths = {kInWidth};
    p_.dtype = pick(4) == 0 && !f32_ ? kBFloat16 : kFloat32;
    p_.adamw = pick(2) == 0;
    p_.nesterov = pick(2) == 0;
    p_.clip = pick(3) == 0;
    const int n = 5 + pick(12);
    for (int i = 0; i < n; ++i) {
      int kind = kLinear;   // first: a parameter always
      while (i > 0 && !allowed(kind = pick(kKinds))) {}
      emit_one(kind);
    }
    std::vector<bool> used(p_.widths.size(), false);
    for (int v : consumed_) used[v] = true;
    used[1] = false;   // v1, the first Linear, always counts: the loss needs a gradient
    for (size_t v = 1; v < p_.widths.size(); ++v) {
      if (used[v]) continue;
      const double sign = pick(2) ? 1.0 : -0.5;   // two draws in a fixed order: a seed is one program
      p_.loss_terms.push_back({static_cast<int>(v), sign * (1 + pick(3))});
    }
    p_.cross_entropy_on_last = pick(2) == 0;
    return std::move(p_);
  }

 private:
  int pick(int n) { return static_cast<int>(g_() % static_cast<uint64_t>(n)); }
  bool allowed(int kind) const {
    const bool rough = (kind >= kFirstRough && kind < kLoss) || kind == kTopk || kind == kCnn;
    return !(smooth_ && rough) && !(f32_ && kind == kRoundTrip);
  }
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
  void emit(std::string tag, std::string text, int64_t width, std::function<Tensor(const Values&, Rig&)> run) {
    p_.ops.push_back({std::move(tag), std::move(text), std::move(run)});
    p_.widths.push_back(width);
  }

  // Kinds in [kFirstRough, kLoss), kTopk and kCnn are not smooth; kRoundTrip rounds through bf16/f16.
  static constexpr int kKinds = 21, kLinear = 4, kFirstRough = 12, kRoundTrip = 13, kLoss = 17, kIndex = 18,
                       kTopk = 19, kCnn = 20;
  void emit_one(int kind) {
    const int a = operand();
    const int64_t wa = p_.widths[a];
    switch (kind) {
      case 0: {
        const Unary* u = &kUnary[pick(static_cast<int>(std::size(kUnary)))];
        while (smooth_ && !u->smooth) u = &kUnary[pick(static_cast<int>(std::size(kUnary)))];
        emit(std::string("unary/") + u->name, std::string(u->name) + "(" + v(a) + ")", wa, [a, fn = u->fn](const Values& x, Rig&) { return fn(x[a]); });
        return;
      }
      case 1: {   // same-shape binary
        const int b = operand_of_width(wa);
        const int op = pick(4);
        const std::string texts[] = {v(a) + " + " + v(b), v(a) + " - " + v(b), "tanh(" + v(a) + ") * " + v(b),
                                     v(a) + " / (" + v(b) + "^2 + 1)"};
        emit(std::string("binary/") + "+-*/"[op], texts[op], wa, [a, b, op](const Values& x, Rig&) {
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
          emit("row_mean", v(a) + " * tanh(mean(" + v(b) + ", 0, keepdim))", wa, [a, b](const Values& x, Rig&) {
            return x[a] * tanh(mean(x[b], {0}, true));
          });
        } else {
          const int k = param({wa}, 0.5);
          emit("bias", v(a) + " + p" + std::to_string(k) + "[" + std::to_string(wa) + "]", wa,
               [a, k](const Values& x, Rig& r) { return x[a] + r.params[k]; });
        }
        return;
      }
      case 3: {   // broadcast a column onto any value
        const int b = operand();
        emit("column_sum", "tanh(sum(" + v(a) + ", 1, keepdim)) * " + v(b), p_.widths[b], [a, b](const Values& x, Rig&) {
          return tanh(sum(x[a], {1}, true)) * x[b];
        });
        return;
      }
      case 4: {   // Linear, with or without a bias
        const int64_t w = pick_width();
        const int k = param({w, wa}, 1.0 / std::sqrt(static_cast<double>(wa)));
        const int kb = pick(2) ? param({w}, 0.1) : -1;
        emit(kb >= 0 ? "linear_bias" : "linear", "linear(" + v(a) + ", p" + std::to_string(k) + (kb >= 0 ? ", bias" : "") + ")", w,
             [a, k, kb](const Values& x, Rig& r) { return linear(x[a], r.params[k], kb >= 0 ? r.params[kb] : Tensor()); });
        return;
      }
      case 5: {   // matmul with a [wa, w] parameter, 2-D or batched 3-D
        const int64_t w = pick_width();
        const int k = param({wa, w}, 1.0 / std::sqrt(static_cast<double>(wa)));
        if (pick(2)) {
          emit("matmul", v(a) + " @ p" + std::to_string(k), w, [a, k](const Values& x, Rig& r) { return matmul(x[a], r.params[k]); });
        } else {
          emit("batched_matmul", "(" + v(a) + ".reshape(2,3," + std::to_string(wa) + ") @ p" + std::to_string(k) + ").reshape", w,
               [a, k, wa](const Values& x, Rig& r) {
                 return matmul(x[a].reshape({2, kRows / 2, wa}), r.params[k]).reshape({kRows, -1});
               });
        }
        return;
      }
      case 6: {   // GEMMs with transposed operands: a @ (a^T b) / rows
        const int b = operand();
        emit("transposed_gemm", "tanh(" + v(a) + ") @ (tanh(" + v(a) + ").t() @ " + v(b) + ") / 6", p_.widths[b], [a, b](const Values& x, Rig&) {
          Tensor t = tanh(x[a]);
          return matmul(t, matmul(t.t(), x[b])) * (1.0 / kRows);
        });
        return;
      }
      case 7: {   // views
        const int kind = pick(5);
        if (kind == 0) {
          emit("transposed_view", "tanh(" + v(a) + ".t()).t()", wa, [a](const Values& x, Rig&) { return tanh(x[a].t()).t(); });
        } else if (kind == 1 && wa >= 6) {
          const int64_t w = (wa + 1) / 2;
          emit("strided_slice", v(a) + ".slice(1, 0, end, 2)", w, [a, wa](const Values& x, Rig&) { return x[a].slice(1, 0, wa, 2); });
        } else if (kind == 2) {
          emit("expand", v(a) + ".unsqueeze(0).expand(2,..).sum(0)", wa, [a, wa](const Values& x, Rig&) {
            return sum(x[a].unsqueeze(0).expand({2, kRows, wa}), {0});
          });
        } else if (kind == 3) {
          emit("permute", v(a) + ".reshape(6,w,1).permute(2,0,1).select(0,0) * 1.5", wa, [a, wa](const Values& x, Rig&) {
            return x[a].reshape({kRows, wa, 1}).permute({2, 0, 1}).select(0, 0) * 1.5;
          });
        } else {   // kind 4, and kind 1 on a value too narrow to halve
          emit("row_concat", v(a) + ".slice(0, 1, 6).contiguous() rows padded by concat", wa, [a](const Values& x, Rig&) {
            return concat({x[a].slice(0, 1, kRows).contiguous(), x[a].slice(0, 0, 1)}, 0);
          });
        }
        return;
      }
      case 8: {   // joins and splits
        const int b = operand();
        const int64_t wb = p_.widths[b];
        if (wa + wb <= kMaxWidth && pick(2)) {
          emit("concat", "concat(" + v(a) + ", " + v(b) + ", 1)", wa + wb,
               [a, b](const Values& x, Rig&) { return concat({x[a], x[b]}, 1); });
        } else if (wa >= 6) {
          consumed_.pop_back();   // b is not used after all
          const int piece = pick(static_cast<int>(wa / 3));
          emit("split", "split(" + v(a) + ", 3, 1)[" + std::to_string(piece) + "]", 3,
               [a, piece](const Values& x, Rig&) { return split(x[a], 3, 1)[piece]; });
        } else if (wb == wa) {
          emit("stack", "stack(" + v(a) + ", " + v(b) + ", 1).sum(1)", wa,
               [a, b](const Values& x, Rig&) { return sum(stack({x[a], x[b]}, 1), {1}); });
        } else {
          consumed_.pop_back();   // b is not used after all
          emit("clone", v(a) + ".clone()", wa, [a](const Values& x, Rig&) { return x[a].clone(); });
        }
        return;
      }
      case 9: {   // normalisation along the last dim
        const int kind = pick(smooth_ ? 4 : 5);   // max is not smooth
        if (kind == 0) {
          emit("softmax", "softmax(" + v(a) + ", 1)", wa, [a](const Values& x, Rig&) { return softmax(x[a], 1); });
        } else if (kind == 1) {
          emit("log_softmax", "log_softmax(" + v(a) + ", 1) * 0.2", wa, [a](const Values& x, Rig&) { return log_softmax(x[a], 1) * 0.2; });
        } else if (kind == 2) {
          const int kw = param({wa}, 1.0), kb = param({wa}, 0.1);
          // Smooth programs use a large eps: a row with almost no variance
          // makes layer_norm curve too sharply for finite differences.
          const double eps = smooth_ ? 0.1 : 1e-5;
          emit("layer_norm", "layer_norm(" + v(a) + ", w, b, eps " + std::to_string(eps) + ")", wa,
               [a, wa, kw, kb, eps](const Values& x, Rig& r) {
                 return layer_norm(x[a], {wa}, r.params[kw], r.params[kb], eps);
               });
        } else if (kind == 3) {
          emit("normalise", "(" + v(a) + " - mean) * rsqrt(var + 1)", wa, [a](const Values& x, Rig&) {
            return (x[a] - mean(x[a], {1}, true)) * rsqrt(var(x[a], {1}, 1, true) + 1.0);
          });
        } else {
          emit("max", v(a) + " * tanh(max(" + v(a) + "))", wa, [a](const Values& x, Rig&) { return x[a] * tanh(max(x[a])); });
        }
        return;
      }
      case 12:
        emit("dropout", "dropout(" + v(a) + ", 0.25)", wa, [a](const Values& x, Rig&) { return dropout(x[a], 0.25); });
        return;
      case kRoundTrip: {   // a low-precision round trip
        const DType dt = pick(2) ? kBFloat16 : kFloat16;
        emit(std::string("round_trip/") + std::string(dtype_name(dt)), "tanh(h * h + h) back in the model's dtype, h = " + v(a) + ".to(" + std::string(dtype_name(dt)) + ")", wa,
             [a, dt](const Values& x, Rig&) {
          Tensor h = x[a].to(dt);
          return tanh(h * h + h).to(x[a].dtype());
        });
        return;
      }
      case 10: {   // masks
        p_.mask_widths.push_back(wa);
        const int m = static_cast<int>(p_.mask_widths.size()) - 1;
        if (pick(2)) {
          const int b = operand_of_width(wa);
          emit("where", "where(mask, " + v(a) + ", " + v(b) + ")", wa,
               [a, b, m](const Values& x, Rig& r) { return where(r.masks[m], x[a], x[b]); });
        } else {
          emit("masked_fill", "masked_fill(" + v(a) + ", mask, 0.5)", wa,
               [a, m](const Values& x, Rig& r) { return masked_fill(x[a], r.masks[m], 0.5); });
        }
        return;
      }
      case 11: {   // an embedding table indexed by the static ids (repeated: kRows > kVocab)
        const int k = param({kVocab, wa}, 1.0);
        emit("embedding", v(a) + " + embedding(p" + std::to_string(k) + ", ids)", wa,
             [a, k](const Values& x, Rig& r) { return x[a] + embedding(r.params[k], r.ids); });
        return;
      }
      case 14:   // noise drawn inside the step
        emit("noise", v(a) + " + 0.1 * randn + 0.1 * rand", wa, [a, wa](const Values& x, Rig& r) {
          const DType dt = x[a].dtype();
          return x[a] + randn({kRows, wa}, dt, r.dev) * 0.1 + rand({kRows, wa}, dt, r.dev) * 0.1;
        });
        return;
      case kLoss: {   // a loss, elementwise (kNone) or reduced and broadcast back
        const int kind = pick(3);
        const bool none = pick(2) == 0;
        const std::string red = none ? "none" : "mean";
        if (kind == 0) {
          const int b = operand_of_width(wa);
          emit("mse_loss", "mse_loss(tanh(" + v(a) + "), tanh(" + v(b) + "), " + red + ")", wa,
               [a, b, none](const Values& x, Rig&) {
                 if (none) return mse_loss(tanh(x[a]), tanh(x[b]), Reduction::kNone);
                 return x[a] * tanh(mse_loss(tanh(x[a]), tanh(x[b])));
               });
        } else if (kind == 1) {
          const int b = operand_of_width(wa);
          const int k = param({wa}, 1.0);
          emit("bce_with_logits", "bce_with_logits(" + v(a) + ", sigmoid(" + v(b) + "), p" + std::to_string(k) +
               ", pos_weight 1.5, " + red + ")", wa, [a, b, k, none](const Values& x, Rig& r) {
                 const Tensor pw = full({x[a].size(1)}, 1.5, x[a].dtype(), r.dev);
                 if (none) return binary_cross_entropy_with_logits(x[a], sigmoid(x[b]), r.params[k], pw, Reduction::kNone);
                 return x[a] * tanh(binary_cross_entropy_with_logits(x[a], sigmoid(x[b]), r.params[k], pw));
               });
        } else {
          emit("nll_loss", "nll_loss(log_softmax(" + v(a) + ", 1), y, ignore 1, " + red + ")", wa,
               [a, none](const Values& x, Rig& r) {
                 if (none) return x[a] * nll_loss(log_softmax(x[a], 1), r.y, Tensor(), 1, Reduction::kNone).unsqueeze(1);
                 return x[a] * tanh(nll_loss(log_softmax(x[a], 1), r.y, Tensor(), 1));
               });
        }
        return;
      }
      case kIndex: {   // gathers and scatters along dim 1 by the labels y (an expanded index)
        const int kind = pick(3);
        if (kind == 0) {
          emit("gather", "gather(" + v(a) + ", 1, y.expand(6, 3))", 3, [a](const Values& x, Rig& r) {
            return gather(x[a], 1, r.y.view({kRows, 1}).expand({kRows, 3}));
          });
        } else if (kind == 1) {
          emit("index_select", "index_select(" + v(a) + ", 1, y)", kRows,
               [a](const Values& x, Rig& r) { return index_select(x[a], 1, r.y); });
        } else {
          const int b = operand();
          emit("scatter_add", "scatter_add(" + v(a) + ", 1, y.expand(6, 3), tanh(" + v(b) + "))", wa,
               [a, b](const Values& x, Rig& r) {
                 return scatter_add(x[a], 1, r.y.view({kRows, 1}).expand({kRows, 3}), tanh(x[b]));
               });
        }
        return;
      }
      case kTopk: {
        const bool largest = pick(2) == 0;
        emit("topk", std::string("topk(") + v(a) + ", 3, 1, " + (largest ? "largest" : "smallest") + ").values", 3,
             [a, largest](const Values& x, Rig&) { return topk(x[a], 3, 1, largest).first; });
        return;
      }
      case 15: {   // persistent state updated in place, then read (a running mean)
        p_.buffer_widths.push_back(wa);
        const int k = static_cast<int>(p_.buffer_widths.size()) - 1;
        emit("running_mean", v(a) + " + running_mean(" + v(a) + ")", wa, [a, k](const Values& x, Rig& r) {
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
      case kCnn: {   // convolutional ops on the value seen as an image [kRows, 1, 1, w] (or [kRows, w] channels)
        const int which = pick(5);
        if (which == 0) {
          const int kw = param({2, 1, 1, 3}, 0.5), kb = param({2}, 0.1);
          emit("cnn/conv2d", "flatten(sum(conv2d(" + v(a) + " as [N,1,1,w], p" + std::to_string(kw) + ", padding (0, 1)), 1))", wa,
               [a, wa, kw, kb](const Values& x, Rig& r) {
                 Tensor h = conv2d(x[a].reshape({kRows, 1, 1, wa}), r.params[kw], r.params[kb], 1, {0, 1});
                 return flatten(sum(h, {1}, true), 1);
               });
        } else if (which == 1) {
          emit("cnn/max_pool2d", "flatten(max_pool2d(" + v(a) + " as [N,1,1,w], (1, 3), 1, (0, 1)))", wa,
               [a, wa](const Values& x, Rig&) {
                 return flatten(max_pool2d(x[a].reshape({kRows, 1, 1, wa}), {1, 3}, Size2(1), {0, 1}), 1);
               });
        } else if (which == 2) {
          const bool include_pad = pick(2) == 0;
          emit("cnn/avg_pool2d", "flatten(avg_pool2d(" + v(a) + " as [N,1,1,w], (1, 3), 1, (0, 1)))", wa,
               [a, wa, include_pad](const Values& x, Rig&) {
                 return flatten(avg_pool2d(x[a].reshape({kRows, 1, 1, wa}), {1, 3}, Size2(1), {0, 1}, false, include_pad), 1);
               });
        } else if (which == 3) {
          emit("cnn/adaptive_avg_pool2d", v(a) + "[:, :3] + flatten(adaptive_avg_pool2d(" + v(a) + " as [N,1,1,w], (1, 3)))", kClasses,
               [a, wa](const Values& x, Rig&) {
                 return x[a].slice(1, 0, kClasses) + flatten(adaptive_avg_pool2d(x[a].reshape({kRows, 1, 1, wa}), {1, 3}), 1);
               });
        } else {
          // Training batch norm over the w channels; its running statistics
          // are persistent state the step updates in place.
          p_.buffer_widths.push_back(wa);
          p_.buffer_widths.push_back(wa);
          const int km = static_cast<int>(p_.buffer_widths.size()) - 2;
          const int kw = param({wa}, 1.0), kb = param({wa}, 0.1);
          emit("cnn/batch_norm", "batch_norm(" + v(a) + ", running stats, w, b, training)", wa,
               [a, wa, km, kw, kb](const Values& x, Rig& r) {
                 return batch_norm(x[a], r.buffers[km].view({wa}), r.buffers[km + 1].view({wa}), r.params[kw],
                                   r.params[kb], true, 0.2, 1e-3);
               });
        }
        return;
      }
      default: {   // in-place on a fresh (non-leaf-free) temporary
        emit("in_place", v(a) + " * 0.5 then add_(" + v(a) + ".detach())", wa, [a](const Values& x, Rig&) {
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
  bool smooth_, f32_;
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
// With noise > 0, every op's output is scaled elementwise by 1 + noise * u,
// u ~ N(0, 1) fixed per op and seed: a model of another backend whose kernels
// round differently (CudaGradientsMatchCpu calibrates its tolerances with it).
std::vector<Tensor> forward(const Program& p, Rig& r, double noise = 0, uint64_t noise_seed = 0) {
  Values v{r.x};
  for (const Instr& op : p.ops) {
    v.push_back(op.run(v, r));
    if (noise > 0) {
      const Tensor u = testing::random_tensor(v.back().shape(), noise_seed * 1000 + v.size()).to(r.dev);
      v.back() = v.back() * (u * noise + 1.0);
    }
  }
  Tensor loss = zeros({}, kFloat32, r.dev);
  for (const auto& [i, c] : p.loss_terms) {
    loss = loss + (c > 0 ? mean(tanh(v[i] * v[i])) : mean(v[i].select(1, 0))).to(kFloat32) * c;
  }
  if (p.cross_entropy_on_last) loss = loss + cross_entropy(v.back(), r.y).to(kFloat32);
  return {loss, v.back()};
}

// zero_grad, forward and backward: {loss, last value}.
std::vector<Tensor> forward_backward(const Program& p, Rig& r, double noise = 0, uint64_t noise_seed = 0) {
  r.opt->zero_grad();
  std::vector<Tensor> out = forward(p, r, noise, noise_seed);
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

// The first element where replay and eager bits differ, or "" when none;
// a and b hold {loss, last value}, then the parameters, then the buffers.
std::string first_difference(const std::vector<std::vector<float>>& a, const std::vector<std::vector<float>>& b,
                             size_t num_params) {
  for (size_t i = 0; i < a.size(); ++i) {
    const std::string what = i < 2 ? (i == 0 ? "loss" : "last value")
                             : i < 2 + num_params ? "parameter " + std::to_string(i - 2)
                                                  : "buffer " + std::to_string(i - 2 - num_params);
    if (a[i].size() != b[i].size()) return what + ": sizes differ";
    for (size_t j = 0; j < a[i].size(); ++j) {
      if (std::memcmp(&a[i][j], &b[i][j], sizeof(float)) != 0) {
        return absl::StrFormat("%s element %d: replay %.9g, eager %.9g", what, j, a[i][j], b[i][j]);
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
    const std::string diff =
        first_difference(observe(*r, {graph->output(0), graph->output(1)}), eager[i - 1], r->params.size());
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

// Loss and gradients of one forward and backward of p on a fresh rig on dev
// (batch 1; the generators seeded, so dropout and randn draw the same on
// every device), brought to the CPU: {loss, gradient of each parameter}.
std::vector<std::vector<double>> loss_and_gradients(const Program& p, Device dev, uint64_t seed, double noise = 0,
                                                    uint64_t noise_seed = 0) {
  std::unique_ptr<Rig> r = make_rig(p, dev, seed);
  fill(*r, 1);
  std::vector<std::vector<double>> out{testing::values(forward_backward(p, *r, noise, noise_seed)[0])};
  for (const Tensor& param : r->params) {
    out.push_back(param.grad().defined() ? testing::values(param.grad()) : std::vector<double>{});
  }
  return out;
}

// Expects b to match a within tolerances calibrated by c: for each entry
// (loss, then each gradient), |b - a| <= 20 * max|c - a| + 1e-6 + 1e-5 |a|.
// c is a run with every op's output perturbed by 1e-6 relative (more than the
// few ulps by which two backends' kernels differ), so the tolerance follows
// the program's own sensitivity: a layer_norm of a row with little variance
// amplifies the last bit, a well-conditioned program is held to ~1e-6.
void expect_within_calibrated(const std::vector<std::vector<double>>& a, const std::vector<std::vector<double>>& b,
                              const std::vector<std::vector<double>>& c, const std::string& what_b) {
  for (size_t k = 0; k < a.size(); ++k) {
    const std::string what = k == 0 ? "loss" : "gradient of parameter " + std::to_string(k - 1);
    ASSERT_EQ(a[k].size(), b[k].size()) << what;
    double sensitivity = 0;
    for (size_t j = 0; j < a[k].size(); ++j) sensitivity = std::max(sensitivity, std::abs(c[k][j] - a[k][j]));
    int reported = 0;
    for (size_t j = 0; j < a[k].size() && reported < 5; ++j) {
      const double tolerance = 20 * sensitivity + 1e-6 + 1e-5 * std::abs(a[k][j]);
      if (std::abs(b[k][j] - a[k][j]) > tolerance) {
        ADD_FAILURE() << what << " element " << j << ": " << what_b << " " << b[k][j] << ", CPU " << a[k][j]
                      << " (tolerance " << tolerance << " from a sensitivity of " << sensitivity << ")";
        ++reported;
      }
    }
  }
}

// The CUDA kernels against the CPU ones on whole programs: one forward and
// backward from the same parameters, inputs and Philox draws (f32 programs
// without bf16/f16 round trips), within tolerances calibrated per program.
TEST_P(RandomProgramTest, CudaGradientsMatchCpu) {
  ENCORE_SKIP_WITHOUT_GPU();
  const Program p = ProgramWriter(GetParam(), ProgramWriter::Mode::kF32).make();
  SCOPED_TRACE("seed " + std::to_string(GetParam()) + ", program:\n" + p.describe());
  const auto cpu = loss_and_gradients(p, kCPU, GetParam());
  const auto calibration = loss_and_gradients(p, kCPU, GetParam(), 1e-6, 1);
  expect_within_calibrated(cpu, loss_and_gradients(p, Device::cuda(0), GetParam()), calibration, "CUDA");
}

// The calibration itself, on the CPU: a run perturbed by a third of the
// calibration's amplitude with other noise (a stand-in for another backend)
// must pass, and a wrong kernel (the first Linear's output off by 0.1 %, as
// from a wrong constant) must fail. Over 1500 programs: all pass and all
// catch the 0.1 % error (a 0.01 % one escapes in 12); perturbed by the full
// calibration amplitude instead, 1 would fail.
TEST_P(RandomProgramTest, CalibratedTolerancesPassRoundingAndCatchAWrongKernel) {
  const Program p = ProgramWriter(GetParam(), ProgramWriter::Mode::kF32).make();
  SCOPED_TRACE("seed " + std::to_string(GetParam()) + ", program:\n" + p.describe());
  const auto cpu = loss_and_gradients(p, kCPU, GetParam());
  const auto calibration = loss_and_gradients(p, kCPU, GetParam(), 1e-6, 1);
  expect_within_calibrated(cpu, loss_and_gradients(p, kCPU, GetParam(), 3e-7, 2), calibration, "perturbed");
  Program wrong = p;
  wrong.ops[0].run = [run = p.ops[0].run](const Values& x, Rig& r) { return run(x, r) * 1.001; };
  ::testing::TestPartResultArray failures;
  {
    ::testing::ScopedFakeTestPartResultReporter reporter(
        ::testing::ScopedFakeTestPartResultReporter::INTERCEPT_ONLY_CURRENT_THREAD, &failures);
    expect_within_calibrated(cpu, loss_and_gradients(wrong, kCPU, GetParam()), calibration, "wrong");
  }
  EXPECT_GT(failures.size(), 0) << "a Linear 0.1 % off went unnoticed";
}

// Expects the gradient of loss(params) (a 0-d f32 tensor) with respect to
// each parameter to match finite differences of the loss, taken with the
// fourth-order central stencil
//   g ~ (8 (L(x+h) - L(x-h)) - (L(x+2h) - L(x-2h))) / 12h,
// whose truncation error is O(h^4), compared unweighted with the analytic
// gradient: |analytic - n(h)| <= atol + rtol |n(h)| + |n(h) - n(3h)|, the last
// term an estimate of n(h)'s own error taken without looking at the analytic
// value; at most a tenth of the elements may need it. Measured over 1500
// smooth programs: the second-order stencil of testing::expect_gradients_match
// had an error floor near 4e-3 at its best step (truncation above 1e-3, f32
// rounding of the loss below); this one at h = 4e-3 passes all 1500 with
// atol 3e-4 and rtol 3e-3, and the estimate widened the tolerance for 6
// elements in all (in 3 programs).
void expect_loss_gradients_match(const std::function<Tensor(const std::vector<Tensor>&)>& loss,
                                 std::vector<Tensor> params, double h, double atol, double rtol) {
  for (Tensor& t : params) t = t.detach().clone().requires_grad_();
  loss(params).backward();
  int uncertain = 0, checked = 0;
  for (size_t k = 0; k < params.size(); ++k) {
    const Tensor analytic = params[k].grad();
    ASSERT_TRUE(analytic.defined()) << "parameter " << k << " got no gradient";
    const std::vector<double> ga = testing::values(analytic), x = testing::values(params[k]);
    for (size_t i = 0; i < x.size(); ++i) {
      auto loss_at = [&](double delta) {
        std::vector<Tensor> moved = params;
        moved[k] = params[k].detach().clone();
        moved[k].reshape({-1}).slice(0, static_cast<int64_t>(i), static_cast<int64_t>(i) + 1).fill_(x[i] + delta);
        NoGradGuard no_grad;
        return static_cast<double>(loss(moved).item<float>());
      };
      auto numeric_at = [&](double step) {
        return (8 * (loss_at(step) - loss_at(-step)) - (loss_at(2 * step) - loss_at(-2 * step))) / (12 * step);
      };
      // n1's error: truncation grows as h^4 and f32 rounding of the loss as
      // 1/h, and programs differ in which one dominates; the estimate at 3h
      // bounds both (|n1 - n2| is at least the larger of them, roughly), so
      // it widens the tolerance where finite differences cannot tell, without
      // looking at the gradient under test.
      const double n1 = numeric_at(h), n2 = numeric_at(3 * h);
      const double tolerance = atol + rtol * std::abs(n1);
      uncertain += std::abs(n1 - n2) > tolerance;
      ++checked;
      EXPECT_NEAR(ga[i], n1, tolerance + std::abs(n1 - n2))
          << "parameter " << k << " element " << i << " of shape " << shape_str(params[k].shape())
          << " (numeric " << n1 << " at step " << h << ", " << n2 << " at " << 3 * h << ")";
    }
  }
  // Elements finite differences cannot check must stay rare, or the test
  // would pass by checking nothing.
  EXPECT_LE(uncertain, checked / 10) << uncertain << " of " << checked << " gradient elements unverifiable";
}

// Backward of whole programs against finite differences of their loss
// (smooth programs, f32). Each op's backward has its own check in tests/ops;
// this one checks the compositions: gradients accumulated over values used
// twice and over repeated embedding ids, through views of views, broadcasts
// summed back, transposed GEMM operands.
TEST_P(RandomProgramTest, GradientsMatchFiniteDifferences) {
  const Program p = ProgramWriter(GetParam(), ProgramWriter::Mode::kSmooth).make();
  SCOPED_TRACE("seed " + std::to_string(GetParam()) + ", program:\n" + p.describe());
  std::unique_ptr<Rig> r = make_rig(p, kCPU, GetParam());
  fill(*r, 1);
  expect_loss_gradients_match(
      [&](const std::vector<Tensor>& params) {
        r->params = params;
        return forward(p, *r)[0];
      },
      r->params, /*h=*/4e-3, /*atol=*/3e-4, /*rtol=*/3e-3);
}

INSTANTIATE_TEST_SUITE_P(Seeds, RandomProgramTest, ::testing::Range(0, kSeeds));

// The generator reaches every branch: a change that shrinks its reach (a
// case that always falls through to its fallback, a wrong kFirstRough) shows
// up here. Each branch emits its own tag.
std::set<std::string> tags_of(ProgramWriter::Mode mode, int seeds) {
  std::set<std::string> tags;
  for (int s = 0; s < seeds; ++s) {
    for (const Instr& op : ProgramWriter(s, mode).make().ops) tags.insert(op.tag);
  }
  return tags;
}

TEST(RandomProgramGeneratorTest, ProgramsReachEveryBranch) {
  std::set<std::string> smooth_tags = {"row_mean", "bias", "column_sum", "linear", "linear_bias", "matmul",
                                       "batched_matmul", "transposed_gemm", "transposed_view", "strided_slice",
                                       "expand", "permute", "row_concat", "concat", "split", "stack", "clone",
                                       "softmax", "log_softmax", "layer_norm", "normalise", "where", "masked_fill",
                                       "embedding", "binary/+", "binary/-", "binary/*", "binary//", "mse_loss",
                                       "bce_with_logits", "nll_loss", "gather", "index_select", "scatter_add"};
  for (const Unary& u : kUnary) {
    if (u.smooth) smooth_tags.insert(std::string("unary/") + u.name);
  }
  std::set<std::string> all_tags = smooth_tags;
  for (const char* t : {"max", "dropout", "round_trip/bf16", "round_trip/f16", "noise", "running_mean", "in_place",
                        "topk", "cnn/conv2d", "cnn/max_pool2d", "cnn/avg_pool2d", "cnn/adaptive_avg_pool2d",
                        "cnn/batch_norm"}) {
    all_tags.insert(t);
  }
  for (const Unary& u : kUnary) all_tags.insert(std::string("unary/") + u.name);
  // Writing programs is cheap (no tensors): look further than the seeds the tests run.
  constexpr int kWritten = 400;
  EXPECT_EQ(tags_of(ProgramWriter::Mode::kAny, kWritten), all_tags);
  EXPECT_EQ(tags_of(ProgramWriter::Mode::kSmooth, kWritten), smooth_tags);
  std::set<std::string> f32_tags = all_tags;
  f32_tags.erase("round_trip/bf16");
  f32_tags.erase("round_trip/f16");
  EXPECT_EQ(tags_of(ProgramWriter::Mode::kF32, kWritten), f32_tags);

  int bf16 = 0, adamw = 0, clip = 0, cross_entropy = 0;
  for (int s = 0; s < kSeeds; ++s) {
    const Program p = ProgramWriter(s).make();
    bf16 += p.dtype == kBFloat16;
    adamw += p.adamw;
    clip += p.clip;
    cross_entropy += p.cross_entropy_on_last;
  }
  for (int n : {bf16, adamw, clip, cross_entropy}) {
    EXPECT_GT(n, 0);
    EXPECT_LT(n, kSeeds);
  }
}

}  // namespace
}  // namespace encore
