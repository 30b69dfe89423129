#ifndef FULCRUM_REPORT_HTML_H_
#define FULCRUM_REPORT_HTML_H_

#include <string>
#include <string_view>

namespace fulcrum {

// Text made safe to place in HTML or SVG, as element content or inside a double-quoted attribute.
std::string html_escape(std::string_view text);

// A coordinate or length for SVG: at most `decimals` decimals, no trailing zeros ("12.5", "3", "-0.25").
std::string svg_number(double value, int decimals = 2);

// Seconds as people read them: "812 µs", "43.1 ms", "3.05 s", "2 min 14 s".
std::string human_seconds(double seconds);

// Bytes in binary units: "512 B", "3.2 MiB", "71.4 GiB".
std::string human_bytes(double bytes);

// A small square of `colour` ("#rrggbb") for a legend entry.
std::string swatch_html(std::string_view colour);

// A whole page: the doctype, `title`, the reports' one style sheet (inline) and `body`'s markup.
std::string html_page(std::string_view title, std::string_view body);

}  // namespace fulcrum

#endif  // FULCRUM_REPORT_HTML_H_
