#include "fulcrum/report/trace_chart.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "fulcrum/core/error.h"

namespace fulcrum {
namespace {

using ::testing::HasSubstr;

// Rows per (process, thread) named from the metadata, kinds by category in order of appearance, times from the
// earliest event in seconds.
TEST(TraceChart, RowsPerProcessAndThreadKindsByCategory) {
  const char* trace = R"({"traceEvents": [
    {"name": "process_name", "ph": "M", "pid": 1, "args": {"name": "rank 1"}},
    {"name": "thread_name", "ph": "M", "pid": 1, "tid": 0, "args": {"name": "compute"}},
    {"name": "F s1 mb0", "cat": "forward", "ph": "X", "pid": 1, "tid": 0, "ts": 1500, "dur": 500},
    {"name": "F s0 mb0", "cat": "forward", "ph": "X", "pid": 0, "tid": 0, "ts": 1000, "dur": 500},
    {"name": "B s0 mb0", "cat": "backward", "ph": "X", "pid": 0, "tid": 0, "ts": 2500, "dur": 1000},
    {"name": "send", "ph": "X", "pid": 0, "tid": 1, "ts": 1500, "dur": 10},
    {"name": "memory", "ph": "C", "pid": 0, "ts": 1000, "args": {"bytes": 5}}]})";
  const TimelineChart chart = trace_chart(trace, "t.json");
  ASSERT_EQ(chart.rows.size(), 3u);
  EXPECT_EQ(chart.rows[0].name, "process 0 thread 0");
  EXPECT_EQ(chart.rows[1].name, "process 0 thread 1");
  EXPECT_EQ(chart.rows[2].name, "rank 1 compute");
  ASSERT_EQ(chart.kinds.size(), 3u);
  EXPECT_EQ(chart.kinds[0].name, "forward");
  EXPECT_EQ(chart.kinds[1].name, "backward");
  EXPECT_EQ(chart.kinds[2].name, "send");
  ASSERT_EQ(chart.rows[0].work.size(), 2u);
  EXPECT_DOUBLE_EQ(chart.rows[0].work[0].start_seconds, 0.0);
  EXPECT_DOUBLE_EQ(chart.rows[0].work[1].start_seconds, 1.5e-3);
  EXPECT_DOUBLE_EQ(chart.rows[0].work[1].end_seconds, 2.5e-3);
  EXPECT_DOUBLE_EQ(chart.rows[2].work[0].start_seconds, 0.5e-3);
}

// Traces recorded by other tools may repeat a key in an event's details (which the chart does not read): read as
// the JSON library reads them, not refused as Fulcrum's own inputs are.
TEST(TraceChart, ReadsTracesThatRepeatAKeyInAnEventsDetails) {
  const char* trace = R"({"traceEvents": [
    {"name": "F s0 mb0", "cat": "forward", "ph": "X", "pid": 0, "tid": 0, "ts": 1000, "dur": 500,
     "args": {"stream": 7, "stream": 7}}]})";
  const TimelineChart chart = trace_chart(trace, "t.json");
  ASSERT_EQ(chart.rows.size(), 1u);
  EXPECT_EQ(chart.rows[0].work.size(), 1u);
}

TEST(TraceChart, RefusesWhatIsNotATrace) {
  const std::pair<const char*, const char*> cases[] = {
      {"[1, 2", "malformed JSON"},
      {R"({"events": []})", "no \"traceEvents\""},
      {R"({"traceEvents": {}})", "is not a list"},
      {R"({"traceEvents": [3]})", "traceEvents[0]: not an object"},
      {R"([{"ph": "X", "pid": 0, "tid": 0, "ts": "a", "dur": 1}])", "traceEvents[0]: \"ts\" must be a number"},
      {R"([{"ph": "X", "pid": 0, "tid": 0, "ts": 1, "dur": -1}])", "negative \"dur\""},
      {R"([{"ph": "X", "pid": 0.5, "tid": 0, "ts": 1, "dur": 1}])", "\"pid\" must be an integer"},
      {R"([{"ph": "M", "name": "process_name", "pid": 0}])", "no complete (\"X\") events"},
      {R"([{"ph": "X", "pid": 0, "tid": 0, "ts": -1e308, "dur": 1}, {"ph": "X", "name": "far", "pid": 0, "tid": 0,
           "ts": 1e308, "dur": 1}])",
       "event \"far\" ends out of range"},
      // Finite, but a span of 3e294 years: no run, and an axis of 300-digit times.
      {R"([{"ph": "X", "pid": 0, "tid": 0, "ts": 1, "dur": 1}, {"ph": "X", "name": "long", "pid": 0, "tid": 0,
           "ts": 1, "dur": 1e308}])",
       "event \"long\" ends out of range"},
  };
  for (const auto& [text, message] : cases) {
    try {
      trace_chart(text, "t.json");
      ADD_FAILURE() << text << " was read";
    } catch (const InputError& e) {
      EXPECT_THAT(e.what(), HasSubstr("t.json")) << text;
      EXPECT_THAT(e.what(), HasSubstr(message)) << text;
    }
  }
}

}  // namespace
}  // namespace fulcrum
