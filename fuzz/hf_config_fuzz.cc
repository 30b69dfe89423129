// libFuzzer target: any bytes given to the config.json reader either make a valid ModelSpec or an InputError.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "fulcrum/core/error.h"
#include "fulcrum/model/hf_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const fulcrum::ModelSpec model =
        fulcrum::model_from_hf_config(std::string_view(reinterpret_cast<const char*>(data), size), "fuzz.json");
    (void)model.parameters();
  } catch (const fulcrum::InputError&) {
  }
  return 0;
}
