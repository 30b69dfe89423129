#include "fulcrum/report/plan_report.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <array>
#include <map>
#include <numeric>
#include <set>

#include "fulcrum/report/bar_chart.h"
#include "fulcrum/report/html.h"
#include "fulcrum/report/sim_sections.h"

namespace fulcrum {
namespace {

// Colours by component role, for forward, backward, input-gradient and weight-gradient passes.
using PassColours = std::array<const char*, 4>;
constexpr PassColours kEncoderColours{"#9ecae1", "#3182bd", "#4292c6", "#08519c"};
constexpr PassColours kSecondEncoderColours{"#a1d99b", "#31a354", "#41ab5d", "#006d2c"};
constexpr PassColours kProjectorColours{"#cbc9e2", "#756bb1", "#807dba", "#54278f"};
constexpr PassColours kLlmColours{"#fdd0a2", "#e6550d", "#f16913", "#a63603"};
constexpr PassColours kMixedColours{"#fbb4b9", "#c51b8a", "#f768a1", "#7a0177"};  // a stage of several components
constexpr const char* kPassNames[] = {"forward", "backward", "input gradient", "weight gradient"};

int pass_index(OpKind op) {
  switch (op) {
    case OpKind::kForward: return 0;
    case OpKind::kBackward: return 1;
    case OpKind::kBackwardInput: return 2;
    case OpKind::kBackwardWeight: return 3;
    default: return -1;
  }
}

// The components each stage's layers belong to, in model order: a stage's pass runs them all, so a stage of
// several is drawn as their pass together, not as one of them.
std::vector<std::vector<int>> stage_components(const Schedule& schedule, const ModelSpec& model) {
  const std::vector<FlatLayer> layers = flat_layers(model);
  std::vector<std::vector<int>> out;
  for (const StageLayers& st : schedule.stages) {
    std::set<int> components;
    for (int32_t l = st.first_layer; l < st.end_layer && l < static_cast<int32_t>(layers.size()); ++l) {
      components.insert(layers[l].component);
    }
    out.emplace_back(components.begin(), components.end());
  }
  return out;
}

std::string timeline_section(const PlanReport& r) {
  const SimResult& s = *r.simulated;
  const TimelineChart chart = simulated_timeline(s, *r.schedule, *r.model);
  std::string out = "<section id=\"timeline\"><h2>One iteration, simulated</h2>";
  const std::string which = s.timeline_replica == s.critical_replica
                                ? std::string("the one whose last pass ends last")
                                : fmt::format("the one whose last pass ends last is replica {}", s.critical_replica);
  out += fmt::format("<p>Data-parallel replica {} of {} ({}), a row per pipeline rank; blank is idle. Iteration {}, "
                     "MFU {:.1f}%, pipeline bubble {:.1f}% of the critical rank's time. Hover over a block for what "
                     "ran.</p>",
                     s.timeline_replica, r.schedule->layout.dp, html_escape(which),
                     html_escape(human_seconds(s.iteration_seconds)), 100 * s.mfu, 100 * s.bubble_fraction);
  out += legend_html(chart);
  out += timeline_svg(chart);
  return out + "</section>";
}

std::string idle_section(const PlanReport& r) {
  const SimResult& s = *r.simulated;
  std::vector<DeviceRow> rows;
  const int pp = r.schedule->layout.pp;
  for (int rank = 0; rank < pp; ++rank) {
    rows.push_back({fmt::format("rank {}", rank), static_cast<size_t>(s.timeline_replica) * pp + rank});
  }
  return idle_section_html(s, rows, "Busy (compute) and idle time by cause, per pipeline rank of the same replica; "
                                    "each bar sums to the iteration.");
}

std::string memory_section(const PlanReport& r) {
  std::vector<std::string> names;
  for (size_t rank = 0; rank < r.simulated->peak_memory_bytes.size(); ++rank) names.push_back(fmt::format("rank {}", rank));
  return memory_section_html(*r.simulated, names, "Memory per pipeline rank",
                             "Peak memory of each rank (the most over its replicas): parameters, gradients and "
                             "optimizer state, then the activations held at the peak.");
}

// Per step, the range of the ranks' loads (a bar from the lightest to the heaviest) and their mean (a tick).
std::string loads_svg(const std::string& id, const RankLoads& loads, double scale_max, const char* colour) {
  constexpr double kWidth = 540, kHeight = 180, kLeft = 56, kBottom = 22;
  const double plot_w = kWidth - kLeft - 6, plot_h = kHeight - kBottom - 6;
  const size_t steps = loads.seconds.size();
  const double pitch = steps ? plot_w / static_cast<double>(steps) : plot_w;
  std::string out = fmt::format("<svg id=\"{}\" class=\"loads\" width=\"{}\" height=\"{}\" viewBox=\"0 0 {} {}\" "
                                "role=\"img\">",
                                id, kWidth, kHeight, kWidth, kHeight);
  auto y_of = [&](double v) { return 6 + plot_h - (scale_max > 0 ? v / scale_max * plot_h : 0); };
  for (size_t k = 0; k < steps; ++k) {
    const auto& ranks = loads.seconds[k];
    if (ranks.empty()) continue;
    const auto [lo, hi] = std::minmax_element(ranks.begin(), ranks.end());
    const double mean = std::accumulate(ranks.begin(), ranks.end(), 0.0) / static_cast<double>(ranks.size());
    const double x = kLeft + pitch * static_cast<double>(k);
    const double w = std::max(1.0, pitch * 0.7);
    out += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"{}\"><title>step {}: ranks from {} "
                       "to {}, mean {}</title></rect>",
                       svg_number(x), svg_number(y_of(*hi)), svg_number(w),
                       svg_number(std::max(2.0, y_of(*lo) - y_of(*hi))), colour, k, html_escape(human_seconds(*lo)),
                       html_escape(human_seconds(*hi)), html_escape(human_seconds(mean)));
    out += fmt::format("<line x1=\"{0}\" y1=\"{2}\" x2=\"{1}\" y2=\"{2}\" class=\"mean\"/>", svg_number(x),
                       svg_number(x + w), svg_number(y_of(mean)));
  }
  out += fmt::format("<line x1=\"{0}\" y1=\"{1}\" x2=\"{2}\" y2=\"{1}\" class=\"axis-line\"/>", svg_number(kLeft),
                     svg_number(6 + plot_h), svg_number(kLeft + plot_w));
  out += fmt::format("<text x=\"0\" y=\"14\">{}</text><text x=\"0\" y=\"{}\">0</text>", html_escape(human_seconds(scale_max)),
                     svg_number(6 + plot_h));
  out += fmt::format("<text x=\"{}\" y=\"{}\">steps 0–{}</text>", svg_number(kLeft), svg_number(kHeight - 4),
                     steps ? steps - 1 : 0);
  return out + "</svg>";
}

// Mean over steps of the slowest rank's load over the mean rank's, less one.
double mean_imbalance(const RankLoads& loads) {
  double sum = 0;
  int n = 0;
  for (const auto& ranks : loads.seconds) {
    if (ranks.empty()) continue;
    const double mean = std::accumulate(ranks.begin(), ranks.end(), 0.0) / static_cast<double>(ranks.size());
    if (mean <= 0) continue;
    sum += *std::max_element(ranks.begin(), ranks.end()) / mean - 1;
    ++n;
  }
  return n ? sum / n : 0;
}

std::string balance_section(const PlanReport& r) {
  std::string out = "<section id=\"balance\"><h2>Load per data-parallel rank, before and after balancing</h2>";
  if (!r.before || !r.after) {
    return out + fmt::format("<p class=\"note\">{}</p></section>", html_escape(r.loads_note));
  }
  double most = 0;
  for (const RankLoads* l : {&*r.before, &*r.after}) {
    for (const auto& ranks : l->seconds) {
      for (double x : ranks) most = std::max(most, x);
    }
  }
  out += fmt::format("<p>Each data-parallel rank's predicted work per step: the whole model's forward and backward "
                     "over its micro-batches, in seconds of one device (its replica's devices share it), the "
                     "first {} steps: a bar runs from the lightest rank to the heaviest, the tick is the mean. Every "
                     "rank waits for the heaviest. The slowest rank carries {:.1f}% more than the mean with {} "
                     "batches, {:.1f}% with {}.</p>",
                     r.after->seconds.size(), 100 * mean_imbalance(*r.before), html_escape(r.before->batcher),
                     100 * mean_imbalance(*r.after), html_escape(r.after->batcher));
  out += "<div class=\"pair\">";
  out += fmt::format("<figure><figcaption>before: {} batches</figcaption>{}</figure>", html_escape(r.before->batcher),
                     loads_svg("loads-before", *r.before, most, "#bdbdbd"));
  out += fmt::format("<figure><figcaption>after: {} batches</figcaption>{}</figure>", html_escape(r.after->batcher),
                     loads_svg("loads-after", *r.after, most, "#31a354"));
  return out + "</div></section>";
}

std::string compare_section(const PlanReport& r) {
  std::vector<ComparedPlan> all{{r.name, r.configuration, r.iteration_seconds, r.epoch_seconds, {}}};
  all.insert(all.end(), r.compared.begin(), r.compared.end());
  return compare_section_html(all, true, "Epoch time of each plan, simulated on the same job.",
                              "No other plan given (<code>--compare other.json</code>).");
}

std::string measured_section(const PlanReport& r) {
  if (!r.measured) return "";
  std::string out = "<section id=\"measured\"><h2>Measured timeline</h2>";
  out += fmt::format("<p>From {}, a row per process and stream, beside the simulated one above.</p>",
                     html_escape(r.measured_source));
  out += legend_html(*r.measured);
  out += timeline_svg(*r.measured);
  return out + "</section>";
}

}  // namespace

TimelineChart simulated_timeline(const SimResult& simulated, const Schedule& schedule, const ModelSpec& model) {
  TimelineChart chart;
  chart.id = "timeline-chart";
  const std::vector<std::vector<int>> components_of_stage = stage_components(schedule, model);
  // Kinds: every component's passes, then encoder work in bubbles, the optimizer step and communication.
  int encoders_seen = 0;
  for (const ComponentSpec& c : model.components) {
    const PassColours& colours = c.role == ComponentRole::kLlm         ? kLlmColours
                                 : c.role == ComponentRole::kProjector ? kProjectorColours
                                 : encoders_seen++ == 0                ? kEncoderColours
                                                                       : kSecondEncoderColours;
    for (int p = 0; p < 4; ++p) chart.kinds.push_back({fmt::format("{} {}", c.name, kPassNames[p]), colours[p]});
  }
  // A kind per pass of each set of components that share a stage, named by all of them.
  std::map<std::vector<int>, int> first_kind_of_set;
  for (const std::vector<int>& set : components_of_stage) {
    if (set.size() < 2 || first_kind_of_set.count(set)) continue;
    first_kind_of_set[set] = static_cast<int>(chart.kinds.size());
    std::vector<std::string> names;
    for (int c : set) names.push_back(model.components[c].name);
    for (int p = 0; p < 4; ++p) {
      chart.kinds.push_back({fmt::format("{} {}", fmt::join(names, "+"), kPassNames[p]), kMixedColours[p]});
    }
  }
  const int in_bubbles = static_cast<int>(chart.kinds.size());
  chart.kinds.push_back({"encoder work in the LLM's bubbles", "#17becf"});
  const int optimizer = in_bubbles + 1;
  chart.kinds.push_back({"optimizer step", "#737373"});
  const int p2p = optimizer + 1;
  chart.kinds.push_back({"transfer between stages", "#bcbd22"});
  const int collective = p2p + 1;
  chart.kinds.push_back({"data-parallel collective", "#8c564b"});

  const int pp = schedule.layout.pp;
  chart.rows.resize(pp);
  for (int rank = 0; rank < pp; ++rank) chart.rows[rank].name = fmt::format("rank {}", rank);
  for (const TimelineEvent& e : simulated.timeline) {
    if (e.rank < 0 || e.rank >= pp) continue;
    ChartRow& row = chart.rows[e.rank];
    ChartInterval i{e.start_seconds, e.end_seconds, 0, "", 1};
    if (e.stream == TimelineEvent::Stream::kCompute) {
      if (e.op == OpKind::kEncoderKernels) {
        i.kind = in_bubbles;
        i.label = fmt::format("encoder pipeline {} stage {} micro-batch {}", e.encoder_pipeline, e.stage, e.micro_batch);
      } else if (is_communication_on_cores(e)) {
        i.kind = e.op == OpKind::kCollective ? collective : p2p;
        i.label = e.encoder_pipeline >= 0
                      ? fmt::format("{} encoder pipeline {} stage {}, on the compute cores", op_kind_name(e.op),
                                    e.encoder_pipeline, e.stage)
                      : fmt::format("{} stage {}, on the compute cores", op_kind_name(e.op), e.stage);
      } else if (e.op == OpKind::kCollective) {
        i.kind = optimizer;
        i.label = "optimizer step";
      } else {
        const int pass = pass_index(e.op);
        if (pass < 0) continue;
        const std::vector<int> none;
        const std::vector<int>& set =
            e.stage >= 0 && e.stage < static_cast<int>(components_of_stage.size()) ? components_of_stage[e.stage] : none;
        i.kind = set.size() > 1 ? first_kind_of_set.at(set) + pass : (set.empty() ? 0 : set.front()) * 4 + pass;
        i.label = fmt::format("{} stage {} micro-batch {}", op_kind_name(e.op), e.stage, e.micro_batch);
      }
      row.work.push_back(std::move(i));
    } else {
      i.kind = e.stream == TimelineEvent::Stream::kP2p ? p2p : collective;
      i.label = fmt::format("{} stage {}", op_kind_name(e.op), e.stage);
      row.comm.push_back(std::move(i));
    }
  }
  chart.end_seconds = simulated.iteration_seconds;
  return chart;
}

std::string render_plan_report(const PlanReport& r) {
  std::string body = fmt::format("<header><h1>{}</h1></header><main>", html_escape(r.title));
  body += summary_section_html(r.summary, {{"The plan", r.plan_command}, {"This report", r.report_command}});
  body += timeline_section(r);
  body += idle_section(r);
  body += memory_section(r);
  body += balance_section(r);
  body += compare_section(r);
  body += measured_section(r);
  body += "</main>";
  return html_page(r.title, body);
}

}  // namespace fulcrum
