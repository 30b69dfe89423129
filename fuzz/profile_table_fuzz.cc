// libFuzzer target: any bytes given to the profile table reader either make a ProfileTable or an InputError.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "fulcrum/core/error.h"
#include "fulcrum/cost/profiled_cost.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const fulcrum::ProfileTable table =
        fulcrum::parse_profile_table(std::string_view(reinterpret_cast<const char*>(data), size), "fuzz.json");
    (void)table.entries.size();
  } catch (const fulcrum::InputError&) {
  }
  return 0;
}
