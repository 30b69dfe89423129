// libFuzzer target: any bytes given to the Chrome trace reader of `fulcrum report --trace` make a chart or an
// InputError, and a chart read draws as SVG with one row group per row: never a crash or a hang.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "fulcrum/core/error.h"
#include "fulcrum/report/timeline_chart.h"
#include "fulcrum/report/trace_chart.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const fulcrum::TimelineChart chart =
        fulcrum::trace_chart(std::string_view(reinterpret_cast<const char*>(data), size), "fuzz.json");
    for (const fulcrum::ChartRow& row : chart.rows) {
      for (const fulcrum::ChartInterval& i : row.work) {
        if (i.start_seconds < 0 || i.end_seconds < i.start_seconds) std::abort();
        if (i.kind < 0 || i.kind >= static_cast<int>(chart.kinds.size())) std::abort();
      }
    }
    const std::string svg = fulcrum::timeline_svg(chart, 400);
    size_t groups = 0;
    for (size_t at = svg.find("class=\"timeline-row\""); at != std::string::npos;
         at = svg.find("class=\"timeline-row\"", at + 1)) {
      ++groups;
    }
    if (groups != chart.rows.size()) std::abort();
  } catch (const fulcrum::InputError&) {
  }
  return 0;
}
