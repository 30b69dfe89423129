#include "fulcrum/sim/chrome_trace.h"

#include <fmt/format.h>

#include <map>
#include <nlohmann/json.hpp>
#include <set>

namespace fulcrum {
namespace {

std::string event_name(const TimelineEvent& e) {
  const char* pass = "";
  switch (e.op) {
    case OpKind::kForward: pass = "F"; break;
    case OpKind::kBackward: pass = "B"; break;
    case OpKind::kBackwardInput: pass = "BI"; break;
    case OpKind::kBackwardWeight: pass = "W"; break;
    case OpKind::kSend: pass = "send"; break;
    case OpKind::kCollective: pass = e.stage < 0 ? "optimizer" : "collective"; break;
    case OpKind::kEncoderKernels: pass = "encoder"; break;
    default: pass = "op"; break;
  }
  if (e.stage < 0) return pass;
  // An encoder pipeline's own stage and micro-batch: "enc2 s1 mb3".
  const std::string stage = e.encoder_pipeline >= 0 ? fmt::format("enc{} s{}", e.encoder_pipeline, e.stage)
                                                    : fmt::format("s{}", e.stage);
  if (e.op == OpKind::kEncoderKernels) return fmt::format("{} mb{}", stage, e.micro_batch);
  if (e.micro_batch < 0) return fmt::format("{} {}", pass, stage);
  return fmt::format("{} {} mb{}", pass, stage, e.micro_batch);
}

const char* stream_name(TimelineEvent::Stream s) {
  switch (s) {
    case TimelineEvent::Stream::kCompute: return "compute";
    case TimelineEvent::Stream::kP2p: return "pipeline p2p";
    case TimelineEvent::Stream::kCollective: return "data-parallel collectives";
  }
  return "?";
}

// Encoder kernels run on their tensor slice's own stream beside the LLM's passes (inside them, in their gaps):
// each encoder pipeline a rank hosts (one per slice) gets a thread after the device's three streams, so no two
// events of one thread overlap.
int thread_of(const TimelineEvent& e) {
  if (e.stream == TimelineEvent::Stream::kCompute && e.encoder_pipeline >= 0) return 3 + e.encoder_pipeline;
  return static_cast<int>(e.stream);
}

}  // namespace

std::string chrome_trace(const SimResult& result, const std::string& title) {
  using Json = nlohmann::ordered_json;
  constexpr double kMicroseconds = 1e6;
  Json events = Json::array();
  std::set<int> ranks;
  for (const TimelineEvent& e : result.timeline) ranks.insert(e.rank);
  for (const MemorySample& m : result.memory_timeline) ranks.insert(m.rank);
  std::map<int, std::set<int>> encoder_pipelines;  // per rank, those whose kernels it runs
  for (const TimelineEvent& e : result.timeline) {
    if (thread_of(e) >= 3) encoder_pipelines[e.rank].insert(e.encoder_pipeline);
  }
  for (int rank : ranks) {
    events.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", rank},
                      {"args", {{"name", fmt::format("pipeline rank {} (replica {})", rank, result.timeline_replica)}}}});
    events.push_back({{"name", "process_sort_index"}, {"ph", "M"}, {"pid", rank}, {"args", {{"sort_index", rank}}}});
    for (auto s : {TimelineEvent::Stream::kCompute, TimelineEvent::Stream::kP2p, TimelineEvent::Stream::kCollective}) {
      events.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", rank}, {"tid", static_cast<int>(s)},
                        {"args", {{"name", stream_name(s)}}}});
    }
    for (int j : encoder_pipelines[rank]) {
      events.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", rank}, {"tid", 3 + j},
                        {"args", {{"name", fmt::format("encoder pipeline {} kernels", j)}}}});
    }
  }
  for (const TimelineEvent& e : result.timeline) {
    Json args{{"stage", e.stage}, {"micro_batch", e.micro_batch}};
    if (e.encoder_pipeline >= 0) args["encoder_pipeline"] = e.encoder_pipeline;
    if (e.tp_comm_seconds > 0) args["tp_comm_us"] = e.tp_comm_seconds * kMicroseconds;
    events.push_back({{"name", event_name(e)},
                      {"cat", std::string(op_kind_name(e.op))},
                      {"ph", "X"},
                      {"pid", e.rank},
                      {"tid", thread_of(e)},
                      {"ts", e.start_seconds * kMicroseconds},
                      {"dur", (e.end_seconds - e.start_seconds) * kMicroseconds},
                      {"args", args}});
  }
  for (const MemorySample& m : result.memory_timeline) {
    events.push_back({{"name", "memory"}, {"ph", "C"}, {"pid", m.rank}, {"ts", m.seconds * kMicroseconds},
                      {"args", {{"GiB", m.bytes / (1024.0 * 1024 * 1024)}}}});
  }
  Json trace{{"traceEvents", events},
             {"displayTimeUnit", "ms"},
             {"otherData", {{"title", title}, {"iteration_seconds", result.iteration_seconds}}}};
  // The title names files from the command line, whose names may not be UTF-8: such bytes become U+FFFD.
  return trace.dump(-1, ' ', false, Json::error_handler_t::replace) + "\n";
}

}  // namespace fulcrum
