#include "fulcrum/report/multitask_report.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>

#include "fulcrum/report/html.h"

namespace fulcrum {
namespace {

// Per task: the forward's colour, then the backward's.
constexpr const char* kTaskColours[][2] = {
    {"#9ecae1", "#3182bd"}, {"#fdd0a2", "#e6550d"}, {"#a1d99b", "#31a354"}, {"#cbc9e2", "#756bb1"},
    {"#fcbba1", "#de2d26"}, {"#d9d9d9", "#636363"}, {"#c7e9c0", "#006d2c"}, {"#fee391", "#cc4c02"},
    {"#c6dbef", "#08519c"}, {"#fbb4b9", "#ae017e"}};

}  // namespace

TimelineChart wave_timeline(const SimResult& simulated, const Schedule& schedule, const ModelSpec& model,
                            const std::vector<std::string>& task_names) {
  TimelineChart chart;
  chart.id = "timeline-chart";
  const size_t tasks = std::max<size_t>(1, task_names.size());
  for (size_t t = 0; t < tasks; ++t) {
    const std::string name = t < task_names.size() ? task_names[t] : fmt::format("task {}", t);
    const auto& colours = kTaskColours[t % std::size(kTaskColours)];
    chart.kinds.push_back({name + " forward", colours[0]});
    chart.kinds.push_back({name + " backward", colours[1]});
  }
  const int optimizer = static_cast<int>(chart.kinds.size());
  chart.kinds.push_back({"optimizer step", "#737373"});
  const int p2p = optimizer + 1;
  chart.kinds.push_back({"transfer between slices", "#bcbd22"});
  const int collective = p2p + 1;
  chart.kinds.push_back({"gradient all-reduce", "#8c564b"});
  const int devices = schedule.layout.pp;
  chart.rows.resize(devices);
  for (int d = 0; d < devices; ++d) chart.rows[d].name = fmt::format("device {}", d);
  chart.row_height_px = devices > 32 ? 8 : 18;
  const auto& slices = schedule.tasks.slices;
  const int waves = schedule.tasks.waves;
  std::vector<double> wave_start(2 * static_cast<size_t>(std::max(0, waves)), std::numeric_limits<double>::infinity());
  for (const TimelineEvent& e : simulated.timeline) {
    if (e.rank < 0 || e.rank >= devices) continue;
    ChartInterval i{e.start_seconds, e.end_seconds, 0, "", 1};
    const bool slice = e.stage >= 0 && e.stage < static_cast<int>(slices.size());
    if (is_communication_on_cores(e)) {
      i.kind = e.op == OpKind::kSend ? p2p : collective;
      i.label = e.op == OpKind::kSend ? fmt::format("send slice {}, on the compute cores", e.stage)
                                      : fmt::format("all-reduce of sync group {}, on the compute cores", e.stage);
      chart.rows[e.rank].work.push_back(std::move(i));
    } else if (e.stream == TimelineEvent::Stream::kCompute) {
      if (e.op == OpKind::kCollective || !slice) {
        i.kind = optimizer;
        i.label = "optimizer step";
      } else {
        const TaskSlice& s = slices[e.stage];
        const bool forward = e.op == OpKind::kForward;
        const size_t task = std::min<size_t>(static_cast<size_t>(std::max(0, s.task)), tasks - 1);
        i.kind = static_cast<int>(2 * task + (forward ? 0 : 1));
        const std::string component = s.component >= 0 && s.component < static_cast<int>(model.components.size())
                                          ? model.components[s.component].name
                                          : "?";
        const int wave = forward ? s.wave : 2 * waves - 1 - s.wave;
        i.label = fmt::format("{} {}: {} layers {}–{} on {} devices (slice {}, wave {})", chart.kinds[i.kind].name,
                              s.micro_batches > 1 ? fmt::format("micro-batch {}", e.micro_batch) : std::string(),
                              component, s.first_layer, s.first_layer + s.layers - 1, s.devices.size(), e.stage, wave);
        if (wave >= 0 && wave < static_cast<int>(wave_start.size())) {
          wave_start[wave] = std::min(wave_start[wave], e.start_seconds);
        }
      }
      chart.rows[e.rank].work.push_back(std::move(i));
    } else {
      i.kind = e.stream == TimelineEvent::Stream::kP2p ? p2p : collective;
      i.label = e.stream == TimelineEvent::Stream::kP2p ? fmt::format("{} slice {}", op_kind_name(e.op), e.stage)
                                                        : fmt::format("all-reduce of sync group {}", e.stage);
      chart.rows[e.rank].comm.push_back(std::move(i));
    }
  }
  for (double start : wave_start) {
    if (start > 0 && start < std::numeric_limits<double>::infinity()) chart.markers.push_back(start);
  }
  chart.end_seconds = simulated.iteration_seconds;
  return chart;
}

std::string render_multitask_report(const MultitaskReport& r) {
  const SimResult& s = *r.simulated;
  std::string body = fmt::format("<header><h1>{}</h1></header><main>", html_escape(r.title));
  body += summary_section_html(r.summary, {{"The plan and this report", r.command}});
  const TimelineChart chart = wave_timeline(s, *r.schedule, *r.model, r.task_names);
  body += "<section id=\"timeline\"><h2>The waves, simulated</h2>";
  body += fmt::format("<p>One iteration, a row per device: each task's slices in its colour (forward light, "
                      "backward dark), a block across the rows of the devices a slice runs on; dashed lines where a "
                      "wave starts; blank is idle. Iteration {}, MFU {:.1f}%.</p>",
                      html_escape(human_seconds(s.iteration_seconds)), 100 * s.mfu);
  body += legend_html(chart) + timeline_svg(chart) + "</section>";
  std::vector<DeviceRow> rows;
  std::vector<std::string> names;
  for (int d = 0; d < r.schedule->layout.pp; ++d) {
    rows.push_back({fmt::format("device {}", d), static_cast<size_t>(d)});
    names.push_back(fmt::format("device {}", d));
  }
  body += idle_section_html(s, rows, "Busy (compute) and idle time by cause, per device; each bar sums to the "
                                     "iteration (waiting for another slice's output counts as pipeline other).");
  body += memory_section_html(s, names, "Memory per device",
                              "Peak memory of each device: the parameters, gradients and optimizer state of the "
                              "layers its slices run, then the activations held at the peak.");
  body += compare_section_html(r.compared, false, "Iteration time of each arrangement, simulated on the same job.",
                               "No other arrangement given.");
  body += "</main>";
  return html_page(r.title, body);
}

}  // namespace fulcrum
