// libFuzzer target for the meta index parser: any input is accepted or rejected with InputError.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "fulcrum/core/error.h"
#include "fulcrum/data/meta_index.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    for (const fulcrum::MetaEntry& entry : fulcrum::parse_meta_index(text, "fuzz")) {
      if (!(entry.repeat_time > 0)) std::abort();
    }
  } catch (const fulcrum::InputError&) {
  }
  return 0;
}
