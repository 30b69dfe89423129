// libFuzzer target for the length-file parsers. The first byte picks the format (JSON array, JSON Lines, CSV);
// the rest is the file, read as a file is (a leading byte order mark skipped or blanked). A parser may reject
// input only with InputError, and must leave the dataset as it was.
#include <simdjson.h>

#include <cstdint>
#include <cstdlib>
#include <string>

#include "fulcrum/core/error.h"
#include "fulcrum/data/length_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const auto format = static_cast<fulcrum::LengthFormat>(data[0] % 3);
  const std::string text(reinterpret_cast<const char*>(data) + 1, size - 1);
  simdjson::padded_string padded(text);
  const std::string_view view = fulcrum::without_byte_order_mark(
      padded.data(), padded.size(), format == fulcrum::LengthFormat::kCsv ? "fuzz.csv" : "fuzz.json");
  fulcrum::Dataset dataset;
  try {
    const uint32_t records = fulcrum::parse_length_records(view, format, "fuzz", dataset);
    if (records != dataset.size()) std::abort();
    for (uint32_t id = 0; id < dataset.size(); ++id) {
      if (dataset.tokens(id) == 0 || dataset.images(id) < 0) std::abort();  // validation let a bad record through
    }
  } catch (const fulcrum::InputError&) {
    if (!dataset.empty()) std::abort();  // all or none
  }
  return 0;
}
