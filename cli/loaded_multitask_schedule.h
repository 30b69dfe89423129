#ifndef FULCRUM_CLI_LOADED_MULTITASK_SCHEDULE_H_
#define FULCRUM_CLI_LOADED_MULTITASK_SCHEDULE_H_

#include <string>

#include "fulcrum/model/task_graph.h"
#include "fulcrum/plan/metaop_graph.h"
#include "fulcrum/sched/schedule.h"

namespace fulcrum {

// A multitask schedule read by `fulcrum multitask --load-schedule` (written by --save-schedule, or by hand),
// checked against the task graph it is timed for: a task, or part of one, left out or run twice, or data that
// never reaches the slice that takes it, would be timed as if it were the iteration. Each check throws
// InputError naming `file` and the slice, device or layer at fault.
class LoadedMultitaskSchedule {
 public:
  LoadedMultitaskSchedule(const Schedule& schedule, const TaskGraph& graph, std::string file);

  // The slices alone, before validate(): each layer of each task's nodes in exactly one slice, on that node's
  // sequences, micro-batches and tokens, and as many of the slices running a layer pass its input's gradient
  // back as the task's nodes running it so do.
  void check_coverage() const;

  // Once validate() has passed: each operator after the one whose output it takes (in a later wave, or in the
  // same wave on the same devices later in every device's forward and earlier in its backward), its input
  // received on every device of its slice where the two slices' devices or their split differ (and the
  // gradient sent back where it has one), and no slice receiving from one it takes nothing from. Layers two
  // nodes of a task run alike are not told apart, so their order and transfers are not checked.
  void check_dataflow() const;

 private:
  const Schedule& schedule_;
  const TaskGraph& graph_;
  std::string file_;
  MetaGraph metaops_;
};

}  // namespace fulcrum

#endif  // FULCRUM_CLI_LOADED_MULTITASK_SCHEDULE_H_
