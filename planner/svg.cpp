// render_svg(): a picture of a plan, so a person can see where memory goes.
#include <algorithm>
#include <cstdint>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "encore/planner.h"
#include "planner/internal.h"
#include "planner/svg_text.h"

namespace encore::planner {
namespace {

// The canvas is fixed; the margins are sized from the text they hold
// (NOTE [ Text extents ] in planner/svg_text.h), so nothing is clipped.
constexpr double kWidth = 1200, kHeight = 700;   // pixels
constexpr double kTop = 40, kBottom = 60, kPad = 10;
constexpr double kFont = 12;
constexpr int kTicks = 4;

std::string xml_escape(absl::string_view text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '&': out += "&amp;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

// lo + (hi - lo) * k / kTicks for 0 <= k <= kTicks, rounded down, without
// overflow: (hi - lo) * k alone overflows past INT64_MAX / kTicks.
int64_t tick(int64_t lo, int64_t hi, int k) {
  const uint64_t d = internal::difference(lo, hi);
  const uint64_t part = d / kTicks * k + d % kTicks * k / kTicks;   // <= d
  return static_cast<int64_t>(static_cast<uint64_t>(lo) + part);   // in [lo, hi]
}

// Maps time steps to x and bytes to y (address grows upwards).
struct Frame {
  int64_t t0, t1, bytes;        // t0 < t1, bytes > 0
  double left = 0, right = 0;   // margins, from the tick labels (fit_margins)
  double x(int64_t t) const {
    return left + (kWidth - left - right) * double(internal::difference(t0, t)) / double(internal::difference(t0, t1));
  }
  double y(double b) const { return kHeight - kBottom - (kHeight - kTop - kBottom) * b / double(bytes); }
  int64_t tick_t(int k) const { return tick(t0, t1, k); }
  int64_t tick_b(int k) const { return tick(0, bytes, k); }
};

// x of the rotated y-axis title's baseline: its glyphs reach kAscent to the left.
constexpr double kYTitleX = kPad + kFont * kSvgAscent;

// Left margin: the y-axis title, then the widest byte label; right margin:
// half the last time label (it is centred on the axis end).
void fit_margins(Frame& f) {
  double widest = 0;
  for (int k = 0; k <= kTicks; ++k) widest = std::max(widest, svg_text_width(absl::StrCat(f.tick_b(k)), kFont));
  f.left = kYTitleX + kFont * kSvgDescent + 8 + widest + 6;
  f.right = std::max(20.0, svg_text_width(absl::StrCat(f.t1), kFont) / 2 + kPad);
}

void draw_axes(const Frame& f, int64_t peak, std::string& out) {
  const double x0 = f.x(f.t0), y0 = f.y(0);
  absl::StrAppendFormat(&out, "<line x1='%.1f' y1='%.1f' x2='%.1f' y2='%.1f' stroke='black'/>\n", x0, y0,
                        f.x(f.t1), y0);
  absl::StrAppendFormat(&out, "<line x1='%.1f' y1='%.1f' x2='%.1f' y2='%.1f' stroke='black'/>\n", x0, y0, x0,
                        f.y(f.bytes));
  for (int k = 0; k <= kTicks; ++k) {
    const int64_t t = f.tick_t(k), b = f.tick_b(k);
    absl::StrAppendFormat(&out, "<text x='%.1f' y='%.1f' text-anchor='middle'>%d</text>\n", f.x(t), y0 + 18, t);
    absl::StrAppendFormat(&out, "<text x='%.1f' y='%.1f' text-anchor='end'>%d</text>\n", x0 - 6, f.y(b) + 4, b);
  }
  absl::StrAppendFormat(&out, "<text x='%.1f' y='%.1f' text-anchor='middle'>time step</text>\n",
                        (x0 + f.x(f.t1)) / 2, kHeight - 15);
  const double mid = (y0 + f.y(f.bytes)) / 2;
  absl::StrAppendFormat(&out,
                        "<text x='%.1f' y='%.1f' text-anchor='middle' transform='rotate(-90 %.1f %.1f)'>"
                        "address (bytes)</text>\n",
                        kYTitleX, mid, kYTitleX, mid);
  absl::StrAppendFormat(&out, "<text x='%.1f' y='22'>peak %d bytes</text>\n", f.left, peak);
}

// The legend, right-aligned on the x-axis title's line (clear of the lower
// bound's own label near the top): a swatch per series.
void draw_legend(std::string& out) {
  const std::string buffers = "buffer (hover: id, bytes, offset, live range)", bound = "lower bound";
  const double y = kHeight - 15, swatch = 24, gap = 6, spacing = 18;
  double x = kWidth - kPad - svg_text_width(bound, kFont);
  absl::StrAppendFormat(&out, "<text x='%.1f' y='%.1f'>%s</text>\n", x, y, bound);
  absl::StrAppendFormat(&out,
                        "<line x1='%.1f' y1='%.1f' x2='%.1f' y2='%.1f' stroke='crimson' stroke-dasharray='6,4' "
                        "stroke-width='1.5'/>\n",
                        x - gap - swatch, y - 4, x - gap, y - 4);
  x -= gap + swatch + spacing + svg_text_width(buffers, kFont);
  absl::StrAppendFormat(&out, "<text x='%.1f' y='%.1f'>%s</text>\n", x, y, buffers);
  absl::StrAppendFormat(&out,
                        "<rect x='%.1f' y='%.1f' width='%.1f' height='10' fill='hsl(137,65%%,62%%)' stroke='#333' "
                        "stroke-width='0.3'/>\n",
                        x - gap - swatch, y - 9, swatch);
}

void draw_level(const Frame& f, int64_t bytes, absl::string_view label, absl::string_view style, std::string& out) {
  absl::StrAppendFormat(&out, "<line x1='%.1f' y1='%.1f' x2='%.1f' y2='%.1f' %s/>\n", f.x(f.t0), f.y(bytes),
                        f.x(f.t1), f.y(bytes), style);
  absl::StrAppendFormat(&out, "<text x='%.1f' y='%.1f' text-anchor='end' fill='crimson'>%s %d</text>\n",
                        f.x(f.t1), f.y(bytes) - 4, label, bytes);
}

}  // namespace

std::string render_svg(absl::Span<const Buffer> buffers, const Plan& plan) {
  Frame f{0, 1, std::max<int64_t>(plan.peak, 1)};
  if (!buffers.empty()) {
    f.t0 = buffers[0].lower;
    f.t1 = buffers[0].upper;
  }
  for (const Buffer& b : buffers) {
    f.t0 = std::min(f.t0, b.lower);
    f.t1 = std::max(f.t1, b.upper);
  }
  const int64_t bound = lower_bound(buffers);
  f.bytes = std::max(f.bytes, bound);
  fit_margins(f);
  std::string out = absl::StrFormat(
      "<svg xmlns='http://www.w3.org/2000/svg' width='%d' height='%d' viewBox='0 0 %d %d' font-family='sans-serif' "
      "font-size='%d'>\n<rect width='100%%' height='100%%' fill='white'/>\n",
      int(kWidth), int(kHeight), int(kWidth), int(kHeight), int(kFont));
  for (size_t i = 0; i < buffers.size() && i < plan.offsets.size(); ++i) {
    const Buffer& b = buffers[i];
    const int64_t offset = plan.offsets[i];
    const double top = double(offset) + double(b.size);   // in double: a plan given by hand may overflow
    absl::StrAppendFormat(&out,
                          "<rect x='%.2f' y='%.2f' width='%.2f' height='%.2f' fill='hsl(%d,65%%,62%%)' "
                          "stroke='#333' stroke-width='0.3'><title>%s: %d bytes at %d, live [%d, %d)</title></rect>\n",
                          f.x(b.lower), f.y(top), f.x(b.upper) - f.x(b.lower),
                          f.y(double(offset)) - f.y(top), int(i * 137 % 360), xml_escape(b.id), b.size, offset,
                          b.lower, b.upper);
  }
  draw_level(f, bound, "lower bound", "stroke='crimson' stroke-dasharray='6,4' stroke-width='1.5'", out);
  draw_axes(f, plan.peak, out);
  draw_legend(out);
  out += "</svg>\n";
  return out;
}

}  // namespace encore::planner
