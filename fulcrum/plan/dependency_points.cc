#include "fulcrum/plan/dependency_points.h"

#include <fmt/format.h>

#include <cmath>
#include <limits>

#include "fulcrum/core/error.h"

namespace fulcrum {

DependencyPoints dependency_points(const SimResult& llm, int micro_batches) {
  constexpr double kMissing = std::numeric_limits<double>::quiet_NaN();
  DependencyPoints out{std::vector<double>(micro_batches, kMissing), std::vector<double>(micro_batches, kMissing)};
  for (const TimelineEvent& e : llm.timeline) {
    if (e.stream != TimelineEvent::Stream::kCompute || e.stage != 0 || e.micro_batch < 0 ||
        e.micro_batch >= micro_batches) {
      continue;
    }
    if (e.op == OpKind::kForward) out.forward_seconds[e.micro_batch] = e.start_seconds;
    if (e.op == OpKind::kBackward || e.op == OpKind::kBackwardInput) out.backward_seconds[e.micro_batch] = e.end_seconds;
  }
  for (int i = 0; i < micro_batches; ++i) {
    if (std::isnan(out.forward_seconds[i]) || std::isnan(out.backward_seconds[i])) {
      throw InputError(fmt::format("the LLM timeline lacks the first stage's forward or backward of micro-batch {} "
                                   "(simulate with the timeline kept)", i));
    }
  }
  return out;
}

}  // namespace fulcrum
