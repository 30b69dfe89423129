#ifndef FULCRUM_REPORT_TRACE_CHART_H_
#define FULCRUM_REPORT_TRACE_CHART_H_

#include <string>
#include <string_view>

#include "fulcrum/report/timeline_chart.h"

namespace fulcrum {

// A Chrome trace (the JSON of Perfetto and chrome://tracing, as `fulcrum simulate --trace` and
// fulcrum.runtime write it) as a chart: a row per process and thread that has complete ("X") events, named from
// the process_name and thread_name metadata, in process then thread order; an event's kind is its category
// ("cat", else its name's first word), coloured in the order kinds first appear. Times start at the earliest
// event. Other phases are skipped. InputError "<file>: ..." for text that is not a trace, naming the event.
TimelineChart trace_chart(std::string_view text, const std::string& file);

}  // namespace fulcrum

#endif  // FULCRUM_REPORT_TRACE_CHART_H_
