#ifndef FULCRUM_REPORT_PLAN_FILE_H_
#define FULCRUM_REPORT_PLAN_FILE_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "fulcrum/data/isf.h"
#include "fulcrum/sched/schedule.h"
#include "fulcrum/sim/simulator.h"

namespace fulcrum {

// A plan file as `fulcrum plan --out` writes it, read back for `fulcrum report`: how the plan was made (the
// request), what it is (the summary under "plan", the schedule) and the micro-batches of the step it was
// simulated on.
struct PlanFile {
  std::string strategy;
  std::optional<std::string> model_name;  // the name the top of the file gives the model, when it does
  std::string model, cluster, dtype = "bf16", profile, data, root = ".", command;  // the request
  int64_t gbs = 0, image_tokens = 0;
  int64_t mbs = 0;  // the summary's micro-batch size
  uint64_t seed = 0;
  std::string batcher;
  int micro_batches = 0;
  double iteration_seconds = 0, epoch_seconds = 0;
  int64_t steps_per_epoch = 0;
  double samples_per_step = 0;  // the mean; ISF's groups set it, other batchers take the global batch
  std::optional<IsfParams> batch_caps;  // the caps ISF's cap search chose, when it did
  // Over the simulated steps (absent in files written before they were recorded): MFU, the mean; peak memory,
  // each stage's most.
  std::optional<double> mfu;
  std::optional<double> peak_memory_bytes;
  std::string configuration;  // configuration_text() of the summary
  std::string recompute;      // recompute_summary() of the schedule
  std::optional<double> efficiency_fine;  // with the encoders in bubbles: the share of their compute there
  Schedule schedule;
  MicroBatchLoads detail_loads;  // per replica, per micro-batch
};

// Throws InputError naming `file` and the record for malformed input, and for a file whose summary and schedule
// disagree (layout, pipeline schedule, stages, recomputation, epoch against its steps) or whose top-level
// cluster, batch or dtype differ from its request's: each would be shown beside a timeline of another plan.
PlanFile read_plan_file(std::string_view text, const std::string& file);

// How many of a schedule's layers recompute nothing, selectively and fully: "90 none, 0 selective, 8 full".
std::string recompute_summary(const Schedule& schedule);

// A plan's configuration in one line, as `fulcrum plan` prints it and its report shows it:
// "DP 8 TP 2 PP 4 VPP 1, micro-batch 1 × 32, 1f1b, random batches".
std::string configuration_text(int64_t dp, int64_t tp, int64_t pp, int64_t vpp, int64_t mbs, int64_t micro_batches,
                               const std::string& schedule, const std::string& batcher);

}  // namespace fulcrum

#endif  // FULCRUM_REPORT_PLAN_FILE_H_
