// How much room SVG text takes, estimated without a font: the pictures
// (planner/svg.cpp, tools/encore_launch.cpp) size their canvas and margins
// from it, and the tests check every <text> of a picture against it.
//
//   const double w = encore::planner::svg_text_width("peak 4096 bytes", 12);
//   // canvas width >= left margin + w
//
// NOTE [ Text extents ]: the estimate is conservative for sans-serif fonts:
// in Helvetica, Arial and DejaVu Sans digits, lower-case letters and
// punctuation are at most 0.65 em wide except m and w (0.9 em), upper-case
// letters at most 0.95 em (W), and a glyph reaches at most 1 em above its
// baseline and 0.3 em below it.
#pragma once

#include <cctype>
#include <string_view>

namespace encore::planner {

// Width in pixels of `text` (already XML-unescaped) at `font_size` pixels.
inline double svg_text_width(std::string_view text, double font_size) {
  double em = 0;
  for (char c : text) {
    const unsigned char u = static_cast<unsigned char>(c);
    if ((u & 0xC0) == 0x80) continue;   // UTF-8 continuation byte: counted with its lead byte
    em += std::isupper(u) || c == 'm' || c == 'w' || c == '@' || u >= 0x80 ? 0.95 : 0.65;
  }
  return em * font_size;
}

constexpr double kSvgAscent = 1.0, kSvgDescent = 0.3;   // em above / below the baseline

}  // namespace encore::planner
