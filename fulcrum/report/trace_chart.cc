#include "fulcrum/report/trace_chart.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>

#include "fulcrum/core/error.h"
#include "fulcrum/core/json_document.h"

namespace fulcrum {
namespace {

// A trace spans at most this much (about 115 days): events past it are corrupt, not a run.
constexpr double kLongestTraceSeconds = 1e7;

constexpr const char* kPalette[] = {"#fdae6b", "#e6550d", "#6baed6", "#3182bd", "#74c476", "#31a354", "#9e9ac8",
                                    "#756bb1", "#bcbd22", "#8c564b", "#e377c2", "#7f7f7f"};

// A number field of `event`, or InputError.
double number(const nlohmann::json& event, const char* key, const std::string& file, size_t index) {
  const auto it = event.find(key);
  if (it == event.end() || !it->is_number()) {
    throw InputError(fmt::format("{}: traceEvents[{}]: \"{}\" must be a number", file, index, key));
  }
  const double v = it->get<double>();
  if (!std::isfinite(v)) throw InputError(fmt::format("{}: traceEvents[{}]: \"{}\" is not finite", file, index, key));
  return v;
}

int64_t id_of(const nlohmann::json& event, const char* key, const std::string& file, size_t index) {
  const auto it = event.find(key);
  if (it == event.end()) return 0;
  if (!it->is_number_integer()) {
    throw InputError(fmt::format("{}: traceEvents[{}]: \"{}\" must be an integer", file, index, key));
  }
  return it->get<int64_t>();
}

std::string string_field(const nlohmann::json& event, const char* key) {
  const auto it = event.find(key);
  return it != event.end() && it->is_string() ? it->get<std::string>() : std::string();
}

}  // namespace

TimelineChart trace_chart(std::string_view text, const std::string& file) {
  const nlohmann::json doc = parse_json_document(text, file, RepeatedKeys::kLastWins);  // recorded by other tools
  const nlohmann::json* events = &doc;
  if (doc.is_object()) {
    const auto it = doc.find("traceEvents");
    if (it == doc.end()) throw InputError(fmt::format("{}: not a Chrome trace (no \"traceEvents\")", file));
    events = &*it;
  }
  if (!events->is_array()) throw InputError(fmt::format("{}: not a Chrome trace (\"traceEvents\" is not a list)", file));
  std::map<int64_t, std::string> process_names;
  std::map<std::pair<int64_t, int64_t>, std::string> thread_names;
  struct Raw {
    std::pair<int64_t, int64_t> row;
    double start_us, duration_us;
    std::string kind, label;
  };
  std::vector<Raw> raw;
  double origin_us = std::numeric_limits<double>::infinity();
  for (size_t i = 0; i < events->size(); ++i) {
    const nlohmann::json& e = (*events)[i];
    if (!e.is_object()) throw InputError(fmt::format("{}: traceEvents[{}]: not an object", file, i));
    const std::string phase = string_field(e, "ph");
    const int64_t pid = id_of(e, "pid", file, i), tid = id_of(e, "tid", file, i);
    if (phase == "M") {
      const auto args = e.find("args");
      const std::string name =
          args != e.end() && args->is_object() ? string_field(*args, "name") : std::string();
      if (string_field(e, "name") == "process_name") process_names[pid] = name;
      if (string_field(e, "name") == "thread_name") thread_names[{pid, tid}] = name;
      continue;
    }
    if (phase != "X") continue;
    const double ts = number(e, "ts", file, i), dur = number(e, "dur", file, i);
    if (dur < 0) throw InputError(fmt::format("{}: traceEvents[{}]: negative \"dur\"", file, i));
    const std::string name = string_field(e, "name");
    std::string kind = string_field(e, "cat");
    if (kind.empty()) kind = name.substr(0, name.find(' '));
    origin_us = std::min(origin_us, ts);
    raw.push_back({{pid, tid}, ts, dur, kind.empty() ? "event" : kind, name});
  }
  if (raw.empty()) throw InputError(fmt::format("{}: the trace has no complete (\"X\") events", file));
  TimelineChart chart;
  chart.id = "measured-chart";
  std::map<std::string, int> kinds;
  std::map<std::pair<int64_t, int64_t>, size_t> rows;
  for (const Raw& r : raw) rows.emplace(r.row, 0);
  for (auto& [key, index] : rows) {
    index = chart.rows.size();
    const auto process = process_names.find(key.first);
    const auto thread = thread_names.find(key);
    const std::string p = process != process_names.end() && !process->second.empty() ? process->second
                                                                                       : fmt::format("process {}", key.first);
    const std::string t = thread != thread_names.end() && !thread->second.empty() ? thread->second
                                                                                   : fmt::format("thread {}", key.second);
    chart.rows.push_back({fmt::format("{} {}", p, t), {}, {}});
  }
  for (Raw& r : raw) {
    auto [it, added] = kinds.emplace(r.kind, static_cast<int>(chart.kinds.size()));
    if (added) chart.kinds.push_back({r.kind, kPalette[chart.kinds.size() % std::size(kPalette)]});
    const double start = (r.start_us - origin_us) * 1e-6, end = start + r.duration_us * 1e-6;
    if (!(end <= kLongestTraceSeconds)) {  // NaN and infinity too
      throw InputError(fmt::format("{}: event \"{}\" ends out of range", file, r.label.substr(0, 60)));
    }
    chart.rows[rows[r.row]].work.push_back({start, end, it->second, std::move(r.label), 1});
  }
  return chart;
}

}  // namespace fulcrum
