// libFuzzer target: any bytes given to the batch plan reader make a BatchPlan or an InputError, never a crash
// or a hang; a plan read is audited against a dataset of its own size (ids beyond it are counted, not read out of
// bounds) and writes back to JSON that reads as the same plan.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>

#include "fulcrum/core/dataset.h"
#include "fulcrum/core/error.h"
#include "fulcrum/data/plan_audit.h"
#include "fulcrum/data/plan_json.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::optional<fulcrum::BatchPlan> read;
  try {
    read = fulcrum::plan_from_json(std::string_view(reinterpret_cast<const char*>(data), size), "fuzz.json");
  } catch (const fulcrum::InputError&) {
    return 0;
  }
  const fulcrum::BatchPlan& plan = *read;
  // A dataset as large as the plan says, capped so that a huge samples_in costs no memory here.
  fulcrum::Dataset dataset;
  const int64_t samples = std::clamp<int64_t>(plan.samples_in, 0, 1 << 16);
  dataset.reserve(static_cast<size_t>(samples));
  for (int64_t i = 0; i < samples; ++i) dataset.add(static_cast<uint32_t>(i % 5), 64 + static_cast<uint32_t>(i % 97), 1);
  (void)fulcrum::audit_plan(plan, dataset);
  const std::string text = fulcrum::plan_to_json(plan);
  try {
    const fulcrum::BatchPlan again = fulcrum::plan_from_json(text, "again.json");
    if (fulcrum::plan_to_json(again) != text) std::abort();  // the round trip changed the plan
  } catch (const fulcrum::InputError&) {
    std::abort();  // the reader refused what the writer wrote
  }
  return 0;
}
