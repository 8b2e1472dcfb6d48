// Checks on the SVG pictures the tools write: every <text> inside the
// viewBox by the estimate the pictures are laid out with (NOTE [ Text
// extents ] in planner/svg_text.h).
//
//   EXPECT_THAT(encore::testing::svg_text_outside_view(svg), ::testing::IsEmpty());
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <regex>
#include <string>
#include <vector>

#include "planner/svg_text.h"

namespace encore::testing {

// The attributes of one element's start tag, e.g. x='10' text-anchor="end".
inline std::map<std::string, std::string> svg_attributes(const std::string& tag) {
  static const std::regex attr(R"re(([\w:-]+)=(?:'([^']*)'|"([^"]*)"))re");
  std::map<std::string, std::string> out;
  for (auto it = std::sregex_iterator(tag.begin(), tag.end(), attr); it != std::sregex_iterator(); ++it) {
    out[(*it)[1]] = (*it)[2].matched ? (*it)[2].str() : (*it)[3].str();
  }
  return out;
}

inline std::string svg_unescape(std::string s) {
  for (const auto& [from, to] : {std::pair<std::string, std::string>{"&lt;", "<"}, {"&gt;", ">"}, {"&quot;", "\""},
                                 {"&apos;", "'"}, {"&amp;", "&"}}) {
    for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size())) {
      s.replace(at, from.size(), to);
    }
  }
  return s;
}

struct SvgText {
  std::string text;
  double x0, y0, x1, y1;   // estimated box in user units, after any rotate()
};

// Every <text> of `svg` with its estimated box. Only rotate(a cx cy)
// transforms are understood (a multiple of 90 degrees); any other fails.
inline std::vector<SvgText> svg_texts(const std::string& svg, std::string* error) {
  std::smatch root;
  if (!std::regex_search(svg, root, std::regex(R"(<svg\b[^>]*>)"))) {
    *error = "no <svg> element";
    return {};
  }
  const std::map<std::string, std::string> svg_attr = svg_attributes(root.str());
  const double default_size = svg_attr.count("font-size") ? std::stod(svg_attr.at("font-size")) : 16;
  static const std::regex text_re(R"(<text\b([^>]*)>([^<]*)</text>)");
  static const std::regex rotate_re(R"(^rotate\((-?[\d.]+)\s+(-?[\d.]+)\s+(-?[\d.]+)\)$)");
  std::vector<SvgText> out;
  for (auto it = std::sregex_iterator(svg.begin(), svg.end(), text_re); it != std::sregex_iterator(); ++it) {
    std::map<std::string, std::string> a = svg_attributes((*it)[1]);
    const std::string text = svg_unescape((*it)[2]);
    const double size = a.count("font-size") ? std::stod(a["font-size"]) : default_size;
    const double x = std::stod(a["x"]), y = std::stod(a["y"]), w = planner::svg_text_width(text, size);
    const std::string anchor = a.count("text-anchor") ? a["text-anchor"] : "start";
    const double left = anchor == "middle" ? x - w / 2 : anchor == "end" ? x - w : x;
    SvgText t{text, left, y - planner::kSvgAscent * size, left + w, y + planner::kSvgDescent * size};
    if (a.count("transform")) {
      std::smatch m;
      if (!std::regex_match(a["transform"], m, rotate_re)) {
        *error = "unsupported transform " + a["transform"];
        return {};
      }
      const double rad = std::stod(m[1]) * 3.14159265358979 / 180, cx = std::stod(m[2]), cy = std::stod(m[3]);
      const double c = std::cos(rad), s = std::sin(rad);
      double bx0 = 1e300, by0 = 1e300, bx1 = -1e300, by1 = -1e300;
      for (double px : {t.x0, t.x1}) {
        for (double py : {t.y0, t.y1}) {
          const double rx = cx + (px - cx) * c - (py - cy) * s, ry = cy + (px - cx) * s + (py - cy) * c;
          bx0 = std::min(bx0, rx), bx1 = std::max(bx1, rx), by0 = std::min(by0, ry), by1 = std::max(by1, ry);
        }
      }
      t = {text, bx0, by0, bx1, by1};
    }
    out.push_back(t);
  }
  return out;
}

// One line per <text> whose estimated box leaves the viewBox (or why the
// picture could not be read); empty when every text fits.
inline std::vector<std::string> svg_text_outside_view(const std::string& svg) {
  std::string error;
  std::smatch root;
  if (!std::regex_search(svg, root, std::regex(R"(<svg\b[^>]*>)"))) return {"no <svg> element"};
  const std::map<std::string, std::string> attr = svg_attributes(root.str());
  if (!attr.count("viewBox")) return {"no viewBox"};
  double vx = 0, vy = 0, vw = 0, vh = 0;
  if (std::sscanf(attr.at("viewBox").c_str(), "%lf %lf %lf %lf", &vx, &vy, &vw, &vh) != 4) return {"bad viewBox"};
  const std::vector<SvgText> texts = svg_texts(svg, &error);
  if (!error.empty()) return {error};
  if (texts.empty()) return {"no <text> elements"};
  std::vector<std::string> out;
  for (const SvgText& t : texts) {
    if (t.x0 < vx || t.y0 < vy || t.x1 > vx + vw || t.y1 > vy + vh) {
      out.push_back("'" + t.text + "' spans x [" + std::to_string(t.x0) + ", " + std::to_string(t.x1) + "], y [" +
                    std::to_string(t.y0) + ", " + std::to_string(t.y1) + "] outside the viewBox " + attr.at("viewBox"));
    }
  }
  return out;
}

}  // namespace encore::testing
