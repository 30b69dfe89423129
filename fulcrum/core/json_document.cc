#include "fulcrum/core/json_document.h"

#include <fmt/format.h>

#include "fulcrum/core/error.h"

namespace fulcrum {

nlohmann::json parse_json_document(std::string_view text, const std::string& file) {
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    throw InputError(fmt::format("{}: malformed JSON at byte {}", file, e.byte));
  } catch (const nlohmann::json::exception& e) {  // e.g. a number too large for a double
    throw InputError(fmt::format("{}: malformed JSON ({})", file, e.what()));
  }
}

}  // namespace fulcrum
