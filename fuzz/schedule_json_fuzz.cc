// libFuzzer target: any bytes given to the Schedule JSON reader make a Schedule or an InputError, and any
// schedule read is either accepted by validate() or refused with an InputError: never a crash or a hang.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "fulcrum/core/error.h"
#include "fulcrum/sched/schedule_json.h"
#include "fulcrum/sched/validate.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const fulcrum::Schedule schedule =
        fulcrum::schedule_from_json(std::string_view(reinterpret_cast<const char*>(data), size), "fuzz.json");
    fulcrum::validate(schedule, "fuzz.json");
    (void)fulcrum::schedule_to_json(schedule);
  } catch (const fulcrum::InputError&) {
  }
  return 0;
}
