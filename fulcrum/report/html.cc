#include "fulcrum/report/html.h"

#include <fmt/format.h>

#include <cmath>

namespace fulcrum {

std::string html_escape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string svg_number(double value, int decimals) {
  if (!std::isfinite(value)) return "0";
  std::string s = fmt::format("{:.{}f}", value, decimals);
  if (s.find('.') != std::string::npos) {
    while (s.back() == '0') s.pop_back();
    if (s.back() == '.') s.pop_back();
  }
  return s == "-0" ? "0" : s;
}

std::string human_seconds(double seconds) {
  // Each unit is chosen by the value as it will print (rounded half to even, as fmt prints an exact tie), so that
  // no time reads "0 µs", "1000 µs", "1000.0 ms" or "2 min 60 s". Below half a microsecond a time rounds to none
  // (what is left of sums of doubles): "0 s".
  const double a = std::abs(seconds);
  if (std::nearbyint(a * 1e6) == 0) return "0 s";
  if (seconds < 0) return "-" + human_seconds(a);
  if (std::nearbyint(a * 1e6) < 1000) return fmt::format("{:.0f} µs", a * 1e6);
  if (std::nearbyint(a * 1e4) < 10000) {
    return fmt::format("{:.{}f} ms", a * 1e3, std::nearbyint(a * 1e5) < 1000 ? 2 : 1);
  }
  if (std::nearbyint(a * 1e3) < 10000) return fmt::format("{:.3f} s", a);
  if (std::nearbyint(a * 10) < 1200) return fmt::format("{:.1f} s", a);
  const double whole = std::nearbyint(a);
  const double minutes = std::floor(whole / 60);
  return fmt::format("{:.0f} min {:.0f} s", minutes, whole - 60 * minutes);
}

std::string human_bytes(double bytes) {
  static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int unit = 0;
  double value = bytes;
  while (std::abs(value) >= 1024 && unit < 4) {
    value /= 1024;
    ++unit;
  }
  return unit == 0 ? fmt::format("{:.0f} B", value) : fmt::format("{:.1f} {}", value, kUnits[unit]);
}

std::string swatch_html(std::string_view colour) {
  // A filled square character in the colour, so the element is not empty.
  return fmt::format("<span class=\"swatch\" style=\"color:{0};background:{0}\">&#9632;</span>", html_escape(colour));
}

namespace {

constexpr const char* kStyle = R"(
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:#222;background:#fff;margin:0 auto;
max-width:1160px;padding:0 16px 48px}
header h1{font-size:22px;margin:20px 0 4px}
h2{font-size:17px;margin:28px 0 6px;border-bottom:1px solid #ddd;padding-bottom:3px}
table{border-collapse:collapse;margin:8px 0}
th,td{padding:2px 10px 2px 0;text-align:left;vertical-align:top}
thead th{border-bottom:1px solid #ccc;font-weight:600}
td{font-variant-numeric:tabular-nums}
table.summary th{font-weight:600;padding-right:18px}
pre{background:#f5f5f5;padding:6px 8px;overflow-x:auto;white-space:pre-wrap}
.note{color:#666}
svg text{font:11px system-ui,sans-serif;fill:#333}
svg .idle{fill:#f4f4f4}
svg .marker{stroke:#444;stroke-width:1;stroke-dasharray:3 2}
svg .cap{stroke:#d62728;stroke-width:2}
svg .mean{stroke:#222;stroke-width:1.5}
svg .axis line,svg .axis-line{stroke:#888}
svg .axis text{text-anchor:middle}
ul.legend{list-style:none;padding:0;margin:6px 0;display:flex;flex-wrap:wrap;gap:4px 16px}
ul.legend li{display:flex;align-items:center;gap:5px}
.swatch{display:inline-block;width:12px;height:12px;line-height:12px;font-size:12px;overflow:hidden;border-radius:2px}
.pair{display:flex;flex-wrap:wrap;gap:16px}
figure{margin:0}
figcaption{font-weight:600;margin-bottom:2px}
)";

}  // namespace

std::string html_page(std::string_view title, std::string_view body) {
  return fmt::format("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<meta name=\"viewport\" "
                     "content=\"width=device-width, initial-scale=1\">\n<title>{}</title>\n<style>{}</style>\n</head>\n"
                     "<body>\n{}\n</body>\n</html>\n",
                     html_escape(title), kStyle, body);
}

}  // namespace fulcrum
