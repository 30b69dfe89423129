#include "fulcrum/report/sim_sections.h"

#include <fmt/format.h>

#include <algorithm>
#include <iterator>

#include "fulcrum/report/bar_chart.h"
#include "fulcrum/report/html.h"

namespace fulcrum {
namespace {

constexpr const char* kCauseNames[] = {"compute",  "pipeline warm-up", "pipeline cool-down", "pipeline other",
                                       "tensor-parallel communication", "data-parallel communication",
                                       "waiting for other replicas"};
const std::vector<std::string> kCauseColours{"#31a354", "#fdae6b", "#fd8d3c", "#e6550d", "#9e9ac8", "#6baed6",
                                             "#bdbdbd"};

}  // namespace

std::string summary_section_html(const std::vector<std::pair<std::string, std::string>>& rows,
                                 const std::vector<std::pair<std::string, std::string>>& commands) {
  std::string out = "<section id=\"summary\"><h2>Plan</h2><table class=\"summary\">";
  for (const auto& [label, value] : rows) {
    out += fmt::format("<tr><th scope=\"row\">{}</th><td>{}</td></tr>", html_escape(label), html_escape(value));
  }
  out += "</table>";
  for (const auto& [caption, command] : commands) {
    if (!command.empty()) {
      out += fmt::format("<p>{}:</p><pre><code>{}</code></pre>", html_escape(caption), html_escape(command));
    }
  }
  return out + "</section>";
}

std::string idle_section_html(const SimResult& s, const std::vector<DeviceRow>& rows, const std::string& intro) {
  std::vector<StackedBar> bars;
  std::string table = "<table><thead><tr><th scope=\"col\"></th>";
  for (const char* name : kCauseNames) table += fmt::format("<th scope=\"col\">{}</th>", name);
  table += "</tr></thead><tbody>";
  for (const DeviceRow& row : rows) {
    if (row.device >= s.per_device.size()) continue;
    const TimeBreakdown& t = s.per_device[row.device];
    const std::vector<double> parts{t.compute, t.pp_warmup, t.pp_cooldown, t.pp_other, t.tp_comm, t.dp_comm, t.dp_wait};
    bars.push_back({row.name, parts});
    table += fmt::format("<tr><th scope=\"row\">{}</th>", html_escape(row.name));
    for (double p : parts) table += fmt::format("<td>{}</td>", html_escape(human_seconds(p)));
    table += "</tr>";
  }
  table += "</tbody></table>";
  std::string out = "<section id=\"idle\"><h2>Where the time goes</h2>";
  out += fmt::format("<p>{}</p>", html_escape(intro));
  out += legend_list_html({std::begin(kCauseNames), std::end(kCauseNames)}, kCauseColours);
  out += stacked_bars_svg("idle-chart", bars, kCauseColours, s.iteration_seconds, 0, human_seconds);
  return out + table + "</section>";
}

std::string memory_section_html(const SimResult& s, const std::vector<std::string>& names, const std::string& heading,
                                const std::string& intro) {
  std::vector<StackedBar> bars;
  double most = s.usable_memory_bytes;
  std::string table = "<table><thead><tr><th scope=\"col\"></th><th scope=\"col\">state</th><th "
                      "scope=\"col\">activations at peak</th><th scope=\"col\">peak</th><th scope=\"col\">of the "
                      "cap</th></tr></thead><tbody>";
  for (size_t i = 0; i < s.peak_memory_bytes.size() && i < names.size(); ++i) {
    const double peak = s.peak_memory_bytes[i];
    const double state = i < s.state_memory_bytes.size() ? std::min(peak, s.state_memory_bytes[i]) : 0;
    bars.push_back({names[i], {state, peak - state}});
    most = std::max(most, peak);
    table += fmt::format("<tr><th scope=\"row\">{}</th><td>{}</td><td>{}</td><td>{}</td><td>{:.0f}%</td></tr>",
                         html_escape(names[i]), html_escape(human_bytes(state)), html_escape(human_bytes(peak - state)),
                         html_escape(human_bytes(peak)),
                         s.usable_memory_bytes > 0 ? 100 * peak / s.usable_memory_bytes : 0.0);
  }
  table += "</tbody></table>";
  std::string out = fmt::format("<section id=\"memory\"><h2>{}</h2>", html_escape(heading));
  out += fmt::format("<p>{} The line is the cap a plan may use: {}{}.</p>", html_escape(intro),
                     html_escape(human_bytes(s.usable_memory_bytes)), s.oom ? " — this plan does not fit" : "");
  const std::vector<std::string> colours{"#636363", "#bdbdbd"};
  out += legend_list_html({"state", "activations"}, colours);
  out += stacked_bars_svg("memory-chart", bars, colours, most * 1.05, s.usable_memory_bytes, human_bytes);
  return out + table + "</section>";
}

std::string compare_section_html(const std::vector<ComparedPlan>& plans, bool epochs, const std::string& intro,
                                 const std::string& note) {
  std::string out = "<section id=\"compare\"><h2>Plans side by side</h2>";
  if (plans.size() < 2) out += fmt::format("<p class=\"note\">{}</p>", note);
  auto measure = [&](const ComparedPlan& p) { return epochs ? p.epoch_seconds : p.iteration_seconds; };
  const double reported = plans.empty() ? 0 : measure(plans.front());
  double most = 0;
  for (const ComparedPlan& p : plans) most = std::max(most, measure(p));
  std::vector<StackedBar> bars;
  std::string table = fmt::format("<table><thead><tr><th scope=\"col\">plan</th><th scope=\"col\">configuration</th>"
                                  "<th scope=\"col\">iteration</th>{}<th scope=\"col\">this plan's speed-up over it"
                                  "</th></tr></thead><tbody>",
                                  epochs ? "<th scope=\"col\">epoch</th>" : "");
  for (const ComparedPlan& p : plans) {
    if (!p.does_not_fit.empty()) {
      table += fmt::format("<tr><th scope=\"row\">{}</th><td colspan=\"{}\">does not fit: {}</td></tr>",
                           html_escape(p.name), epochs ? 4 : 3, html_escape(p.does_not_fit));
      continue;
    }
    bars.push_back({p.name, {measure(p)}});
    table += fmt::format("<tr><th scope=\"row\">{}</th><td>{}</td><td>{}</td>{}<td>{}</td></tr>", html_escape(p.name),
                         html_escape(p.configuration), html_escape(human_seconds(p.iteration_seconds)),
                         epochs ? fmt::format("<td>{}</td>", html_escape(human_seconds(p.epoch_seconds))) : "",
                         reported > 0 ? fmt::format("{:.2f}×", measure(p) / reported) : "–");
  }
  table += "</tbody></table>";
  out += fmt::format("<p>{}</p>", html_escape(intro));
  out += stacked_bars_svg("compare-chart", bars, {"#3182bd"}, most * 1.05, 0, human_seconds);
  return out + table + "</section>";
}

}  // namespace fulcrum
