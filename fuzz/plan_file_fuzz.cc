// libFuzzer target: any bytes given to the plan file reader (`fulcrum report --plan`, what `fulcrum plan --out`
// writes) make a PlanFile or an InputError, never a crash or a hang; a plan read holds a schedule that validates
// and the loads of every replica's micro-batches.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "fulcrum/core/error.h"
#include "fulcrum/report/plan_file.h"
#include "fulcrum/sched/validate.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const fulcrum::PlanFile plan =
        fulcrum::read_plan_file(std::string_view(reinterpret_cast<const char*>(data), size), "fuzz.json");
    fulcrum::validate(plan.schedule, "fuzz.json");  // the reader validated it: this must not throw
    if (static_cast<int>(plan.detail_loads.per_replica.size()) != plan.schedule.layout.dp) std::abort();
    for (const auto& replica : plan.detail_loads.per_replica) {
      if (static_cast<int>(replica.size()) != plan.schedule.micro_batches) std::abort();
    }
  } catch (const fulcrum::InputError&) {
  }
  return 0;
}
