// libFuzzer target: any bytes given to the Fulcrum model reader either make a valid ModelSpec or an InputError;
// a model it accepts writes back to JSON that reads as the same model.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "fulcrum/core/error.h"
#include "fulcrum/model/model_json.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const fulcrum::ModelSpec model =
        fulcrum::model_from_json(std::string_view(reinterpret_cast<const char*>(data), size), "fuzz.json");
    (void)model.parameters();
    if (!(fulcrum::model_from_json(fulcrum::model_to_json(model).dump(), "again.json") == model)) std::abort();
  } catch (const fulcrum::InputError&) {
  }
  return 0;
}
